#include "model/tensor_names.h"

#include <array>

namespace shoal {
namespace {

struct NameEntry {
  TensorKind kind;
  const char* name;  // "%" marks a per-layer tensor: blk.<layer>.<name>
  bool per_layer;
};

constexpr std::array kNames = {
    NameEntry{TensorKind::TokenEmbd, "token_embd.weight", false},
    NameEntry{TensorKind::OutputNorm, "output_norm.weight", false},
    NameEntry{TensorKind::Output, "output.weight", false},
    NameEntry{TensorKind::RopeFreqs, "rope_freqs.weight", false},
    NameEntry{TensorKind::AttnNorm, "attn_norm.weight", true},
    NameEntry{TensorKind::AttnQ, "attn_q.weight", true},
    NameEntry{TensorKind::AttnK, "attn_k.weight", true},
    NameEntry{TensorKind::AttnV, "attn_v.weight", true},
    NameEntry{TensorKind::AttnOutput, "attn_output.weight", true},
    NameEntry{TensorKind::AttnQBias, "attn_q.bias", true},
    NameEntry{TensorKind::AttnKBias, "attn_k.bias", true},
    NameEntry{TensorKind::AttnVBias, "attn_v.bias", true},
    NameEntry{TensorKind::FfnNorm, "ffn_norm.weight", true},
    NameEntry{TensorKind::FfnGate, "ffn_gate.weight", true},
    NameEntry{TensorKind::FfnUp, "ffn_up.weight", true},
    NameEntry{TensorKind::FfnDown, "ffn_down.weight", true},
};
static_assert(kNames.size() == static_cast<size_t>(TensorKind::COUNT));

}  // namespace

std::string tensor_name(TensorKind kind, int layer) {
  const NameEntry& e = kNames[static_cast<size_t>(kind)];
  return e.per_layer ? "blk." + std::to_string(layer) + "." + e.name : e.name;
}

}  // namespace shoal
