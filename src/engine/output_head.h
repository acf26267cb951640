#pragma once
// The output head: the final norm, the vocabulary matmul and Gemma's
// softcap, on rows already on `backend`. The primary runs it (Pipeline),
// and so does a tensor group that holds it (a worker's stage: each member
// its share of the vocabulary's rows, the group's TensorSplitBackend trading
// them), so both compute the same bits the same way.
#include "backend/backend.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/weights.h"

namespace shoal {

// rows: [m][n_embd], normed in place; logits: [m][n_vocab].
void run_output_head(Backend& backend, const ModelWeights& weights, const ModelConfig& config, DevicePtr rows,
                     DevicePtr logits, int m);
// The batch's rows with logits to the front of `rows` ([batch.size()][width]
// on `backend`), in order; returns their count.
int gather_logit_rows(Backend& backend, const Batch& batch, DevicePtr rows, int width);

// The head after its norm: rows already normed, through `output` (the
// model's, or an MTP block's own) and the softcap.
void project_to_vocabulary(Backend& backend, const Matrix& output, const ModelConfig& config, DevicePtr rows,
                           DevicePtr logits, int m);

}  // namespace shoal
