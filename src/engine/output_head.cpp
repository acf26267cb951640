#include "engine/output_head.h"

namespace shoal {

void run_output_head(Backend& backend, const ModelWeights& weights, const ModelConfig& config, DevicePtr rows,
                     DevicePtr logits, int m) {
  backend.rmsnorm(rows, weights.output_norm, rows, m, config.n_embd, config.norm_eps);
  project_to_vocabulary(backend, weights.output, config, rows, logits, m);
}

void project_to_vocabulary(Backend& backend, const Matrix& output, const ModelConfig& config, DevicePtr rows,
                           DevicePtr logits, int m) {
  backend.matmul(output, rows, logits, m);
  if (config.logit_softcap > 0.0f)
    backend.softcap(logits, config.logit_softcap, static_cast<int64_t>(m) * config.n_vocab);
}

}  // namespace shoal
