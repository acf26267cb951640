#include "engine/output_head.h"

namespace shoal {

void run_output_head(Backend& backend, const ModelWeights& weights, const ModelConfig& config, DevicePtr rows,
                     DevicePtr logits, int m) {
  backend.rmsnorm(rows, weights.output_norm, rows, m, config.n_embd, config.norm_eps);
  project_to_vocabulary(backend, weights.output, config, rows, logits, m);
}

int gather_logit_rows(Backend& backend, const Batch& batch, DevicePtr rows, int width) {
  int to = 0;
  for (int t = 0; t < batch.size(); ++t)
    if (batch.logits[t]) {
      if (to != t) backend.copy(rows + static_cast<int64_t>(to) * width, rows + static_cast<int64_t>(t) * width,
                                width * sizeof(float));
      ++to;
    }
  return to;
}

void project_to_vocabulary(Backend& backend, const Matrix& output, const ModelConfig& config, DevicePtr rows,
                           DevicePtr logits, int m) {
  backend.matmul(output, rows, logits, m);
  if (config.logit_softcap > 0.0f)
    backend.softcap(logits, config.logit_softcap, static_cast<int64_t>(m) * config.n_vocab);
}

}  // namespace shoal
