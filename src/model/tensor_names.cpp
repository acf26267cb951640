#include "model/tensor_names.h"

#include <array>

namespace shoal {
namespace {

using enum Dim;
using K = TensorKind;

constexpr std::array kTensors = {
    TensorSpec{K::TokenEmbd, "token_embd.weight", false, {Embd, Vocab, One}, false},
    TensorSpec{K::OutputNorm, "output_norm.weight", false, {Embd, One, One}, true},
    TensorSpec{K::Output, "output.weight", false, {Embd, Vocab, One}, false},
    TensorSpec{K::RopeFreqs, "rope_freqs.weight", false, {RopeHalf, One, One}, true},
    TensorSpec{K::PerLayerTokenEmbd, "per_layer_token_embd.weight", false, {PerLayerAll, Vocab, One}, false},
    TensorSpec{K::PerLayerModelProj, "per_layer_model_proj.weight", false, {Embd, PerLayerAll, One}, false},
    TensorSpec{K::PerLayerProjNorm, "per_layer_proj_norm.weight", false, {PerLayer, One, One}, true},
    TensorSpec{K::AttnNorm, "attn_norm.weight", true, {Embd, One, One}, true},
    TensorSpec{K::AttnQ, "attn_q.weight", true, {Embd, QProj, One}, false},
    TensorSpec{K::AttnK, "attn_k.weight", true, {Embd, KvWidth, One}, false},
    TensorSpec{K::AttnV, "attn_v.weight", true, {Embd, KvWidth, One}, false},
    TensorSpec{K::AttnQBias, "attn_q.bias", true, {QWidth, One, One}, true},
    TensorSpec{K::AttnKBias, "attn_k.bias", true, {KvWidth, One, One}, true},
    TensorSpec{K::AttnVBias, "attn_v.bias", true, {KvWidth, One, One}, true},
    TensorSpec{K::AttnQNorm, "attn_q_norm.weight", true, {QNorm, One, One}, true},
    TensorSpec{K::AttnKNorm, "attn_k_norm.weight", true, {KNorm, One, One}, true},
    TensorSpec{K::AttnOutput, "attn_output.weight", true, {AttnOut, Embd, One}, false},
    TensorSpec{K::AttnPostNorm, "post_attention_norm.weight", true, {Embd, One, One}, true},
    TensorSpec{K::FfnNorm, "ffn_norm.weight", true, {Embd, One, One}, true},
    TensorSpec{K::FfnGate, "ffn_gate.weight", true, {Embd, Ff, One}, false},
    TensorSpec{K::FfnUp, "ffn_up.weight", true, {Embd, Ff, One}, false},
    TensorSpec{K::FfnDown, "ffn_down.weight", true, {Ff, Embd, One}, false},
    TensorSpec{K::FfnGateInp, "ffn_gate_inp.weight", true, {Embd, Experts, One}, false},
    TensorSpec{K::FfnGateExps, "ffn_gate_exps.weight", true, {Embd, FfExpert, Experts}, false},
    TensorSpec{K::FfnUpExps, "ffn_up_exps.weight", true, {Embd, FfExpert, Experts}, false},
    TensorSpec{K::FfnDownExps, "ffn_down_exps.weight", true, {FfExpert, Embd, Experts}, false},
    TensorSpec{K::FfnPostNorm, "post_ffw_norm.weight", true, {Embd, One, One}, true},
    TensorSpec{K::AttnQkv, "attn_qkv.weight", true, {Embd, ConvWidth, One}, false},
    TensorSpec{K::AttnGate, "attn_gate.weight", true, {Embd, ValueWidth, One}, false},
    TensorSpec{K::SsmConv1d, "ssm_conv1d.weight", true, {ConvKernel, ConvWidth, One}, true},
    TensorSpec{K::SsmDt, "ssm_dt.bias", true, {SsmHeads, One, One}, true},
    TensorSpec{K::SsmA, "ssm_a", true, {SsmHeads, One, One}, true},
    TensorSpec{K::SsmBeta, "ssm_beta.weight", true, {Embd, SsmHeads, One}, false},
    TensorSpec{K::SsmAlpha, "ssm_alpha.weight", true, {Embd, SsmHeads, One}, false},
    TensorSpec{K::SsmNorm, "ssm_norm.weight", true, {SsmHeadDim, One, One}, true},
    TensorSpec{K::SsmOut, "ssm_out.weight", true, {ValueWidth, Embd, One}, false},
    TensorSpec{K::FfnGateInpShexp, "ffn_gate_inp_shexp.weight", true, {Embd, One, One}, false},
    TensorSpec{K::FfnGateShexp, "ffn_gate_shexp.weight", true, {Embd, FfShared, One}, false},
    TensorSpec{K::FfnUpShexp, "ffn_up_shexp.weight", true, {Embd, FfShared, One}, false},
    TensorSpec{K::FfnDownShexp, "ffn_down_shexp.weight", true, {FfShared, Embd, One}, false},
    TensorSpec{K::AttnOutputBias, "attn_output.bias", true, {Embd, One, One}, true},
    TensorSpec{K::AttnSinks, "attn_sinks.weight", true, {Heads, One, One}, true},
    TensorSpec{K::FfnGateInpBias, "ffn_gate_inp.bias", true, {Experts, One, One}, true},
    TensorSpec{K::FfnGateExpsBias, "ffn_gate_exps.bias", true, {FfExpert, Experts, One}, true},
    TensorSpec{K::FfnUpExpsBias, "ffn_up_exps.bias", true, {FfExpert, Experts, One}, true},
    TensorSpec{K::FfnDownExpsBias, "ffn_down_exps.bias", true, {Embd, Experts, One}, true},
    TensorSpec{K::AttnQA, "attn_q_a.weight", true, {Embd, QLora, One}, false},
    TensorSpec{K::AttnQANorm, "attn_q_a_norm.weight", true, {QLora, One, One}, true},
    TensorSpec{K::AttnQB, "attn_q_b.weight", true, {QLora, QProj, One}, false},
    TensorSpec{K::AttnKvAMqa, "attn_kv_a_mqa.weight", true, {Embd, KvWidth, One}, false},
    TensorSpec{K::AttnKvANorm, "attn_kv_a_norm.weight", true, {KvLora, One, One}, true},
    TensorSpec{K::AttnKB, "attn_k_b.weight", true, {QkNope, KvLora, Heads}, false},
    TensorSpec{K::AttnVB, "attn_v_b.weight", true, {KvLora, MlaValue, Heads}, false},
    TensorSpec{K::FfnExpProbsB, "exp_probs_b.bias", true, {Experts, One, One}, true},
    TensorSpec{K::SsmBetaAlpha, "ssm_ba.weight", true, {Embd, SsmHeadPairs, One}, false},
    TensorSpec{K::NextnEhProj, "nextn.eh_proj.weight", true, {EmbdPair, Embd, One}, false},
    TensorSpec{K::NextnEnorm, "nextn.enorm.weight", true, {Embd, One, One}, true},
    TensorSpec{K::NextnHnorm, "nextn.hnorm.weight", true, {Embd, One, One}, true},
    TensorSpec{K::NextnSharedHeadNorm, "nextn.shared_head_norm.weight", true, {Embd, One, One}, true},
    TensorSpec{K::LayerOutScale, "layer_output_scale.weight", true, {One, One, One}, true},
    TensorSpec{K::FfnPreNorm2, "pre_ffw_norm_2.weight", true, {Embd, One, One}, true},
    TensorSpec{K::FfnPostNorm1, "post_ffw_norm_1.weight", true, {Embd, One, One}, true},
    TensorSpec{K::FfnPostNorm2, "post_ffw_norm_2.weight", true, {Embd, One, One}, true},
    TensorSpec{K::FfnGateInpScale, "ffn_gate_inp.scale", true, {Embd, One, One}, true},
    TensorSpec{K::FfnDownExpsScale, "ffn_down_exps.scale", true, {Experts, One, One}, true},
    TensorSpec{K::FfnGateUpExps, "ffn_gate_up_exps.weight", true, {Embd, FfExpertPair, Experts}, false},
    TensorSpec{K::PerLayerInpGate, "inp_gate.weight", true, {Embd, PerLayer, One}, false},
    TensorSpec{K::PerLayerProj, "proj.weight", true, {PerLayer, Embd, One}, false},
    TensorSpec{K::PerLayerPostNorm, "post_norm.weight", true, {Embd, One, One}, true},
};
static_assert(kTensors.size() == static_cast<size_t>(TensorKind::COUNT));

constexpr bool in_kind_order() {
  for (size_t i = 0; i < kTensors.size(); ++i)
    if (static_cast<size_t>(kTensors[i].kind) != i || kTensors[i].per_layer != (i >= kFirstLayerKind)) return false;
  return true;
}
static_assert(in_kind_order());

}  // namespace

const TensorSpec& tensor_spec(TensorKind kind) { return kTensors[static_cast<size_t>(kind)]; }

std::string tensor_name(TensorKind kind, int layer) {
  const TensorSpec& e = tensor_spec(kind);
  return e.per_layer ? "blk." + std::to_string(layer) + "." + e.name : e.name;
}

std::optional<TensorKind> layer_kind_named(std::string_view name) {
  for (const TensorSpec& e : kTensors)
    if (e.per_layer && name == e.name) return e.kind;
  return std::nullopt;
}

}  // namespace shoal
