#pragma once
// Every GGUF tensor name the models use comes from this one table
// (blk.3.attn_norm.weight = tensor_name(TensorKind::AttnNorm, 3)).
#include <string>

namespace shoal {

enum class TensorKind {
  TokenEmbd, OutputNorm, Output, RopeFreqs,
  AttnNorm, AttnQ, AttnK, AttnV, AttnOutput, AttnQBias, AttnKBias, AttnVBias,
  FfnNorm, FfnGate, FfnUp, FfnDown,
  COUNT  // sentinel
};

// The GGUF name of a tensor; `layer` is ignored for whole-model tensors.
std::string tensor_name(TensorKind kind, int layer = -1);

}  // namespace shoal
