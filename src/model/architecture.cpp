#include "model/architecture.h"

#include <array>

#include "util/error.h"

namespace shoal {
namespace {

using K = TensorKind;
constexpr LayerTensor kOptional(K k) { return {k, true}; }

// Llama-style attention: optional biases (qwen2 has them), no Q/K norm.
constexpr LayerTensor kLlama[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, kOptional(K::AttnQBias), kOptional(K::AttnKBias),
    kOptional(K::AttnVBias), {K::AttnOutput}, {K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}};
constexpr LayerTensor kLlamaExperts[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, {K::AttnOutput}, {K::FfnNorm}, {K::FfnGateInp},
    {K::FfnGateExps}, {K::FfnUpExps}, {K::FfnDownExps}};
constexpr LayerTensor kQwen2[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, {K::AttnQBias}, {K::AttnKBias}, {K::AttnVBias},
    {K::AttnOutput}, {K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}};
// Qwen3: per-head RMSNorm on Q and K before rope, no biases.
constexpr LayerTensor kQwen3[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, {K::AttnQNorm}, {K::AttnKNorm}, {K::AttnOutput},
    {K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}};
constexpr LayerTensor kQwen3Experts[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, {K::AttnQNorm}, {K::AttnKNorm}, {K::AttnOutput},
    {K::FfnNorm}, {K::FfnGateInp}, {K::FfnGateExps}, {K::FfnUpExps}, {K::FfnDownExps}};
// Gemma 3: Q/K norm, and norms after attention and after the FFN too.
constexpr LayerTensor kGemma3[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, {K::AttnQNorm}, {K::AttnKNorm}, {K::AttnOutput},
    {K::AttnPostNorm}, {K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}, {K::FfnPostNorm}};

// Qwen3.5: gated full attention (Q/K norm, the query's output gate) and,
// on the other layers, a Gated DeltaNet; a dense FFN after both.
constexpr LayerTensor kQwen35[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, {K::AttnQNorm}, {K::AttnKNorm}, {K::AttnOutput},
    {K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}};
constexpr LayerTensor kQwen35DeltaNet[] = {
    {K::AttnNorm}, {K::AttnQkv}, {K::AttnGate}, {K::SsmConv1d}, {K::SsmDt}, {K::SsmA}, {K::SsmBeta},
    {K::SsmAlpha}, {K::SsmNorm}, {K::SsmOut}, {K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}};

constexpr LayerTensor kQwen35Experts[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, {K::AttnQNorm}, {K::AttnKNorm}, {K::AttnOutput},
    {K::FfnNorm}, {K::FfnGateInp}, {K::FfnGateExps}, {K::FfnUpExps}, {K::FfnDownExps}};
constexpr LayerTensor kQwen35DeltaNetExperts[] = {
    {K::AttnNorm}, {K::AttnQkv}, {K::AttnGate}, {K::SsmConv1d}, {K::SsmDt}, {K::SsmA}, {K::SsmBeta},
    {K::SsmAlpha}, {K::SsmNorm}, {K::SsmOut}, {K::FfnNorm}, {K::FfnGateInp}, {K::FfnGateExps}, {K::FfnUpExps},
    {K::FfnDownExps}};
// Qwen3-Next: Qwen3.5-MoE's layers, but beta and alpha in one projection.
constexpr LayerTensor kQwen3NextDeltaNet[] = {
    {K::AttnNorm}, {K::AttnQkv}, {K::AttnGate}, {K::SsmConv1d}, {K::SsmDt}, {K::SsmA}, {K::SsmBetaAlpha},
    {K::SsmNorm}, {K::SsmOut}, {K::FfnNorm}, {K::FfnGateInp}, {K::FfnGateExps}, {K::FfnUpExps}, {K::FfnDownExps}};
constexpr LayerTensor kSharedExpert[] = {
    {K::FfnGateInpShexp}, {K::FfnGateShexp}, {K::FfnUpShexp}, {K::FfnDownShexp}};

// gpt-oss: biased attention with sinks, a window every other layer, and
// experts with biases and a clamped SwiGLU.
constexpr LayerTensor kGptOss[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, {K::AttnQBias}, {K::AttnKBias}, {K::AttnVBias},
    {K::AttnOutput}, {K::AttnOutputBias}, {K::AttnSinks}, {K::FfnNorm}, {K::FfnGateInp}, {K::FfnGateInpBias},
    {K::FfnGateExps}, {K::FfnGateExpsBias}, {K::FfnUpExps}, {K::FfnUpExpsBias}, {K::FfnDownExps},
    {K::FfnDownExpsBias}};

// DeepSeek V2/V3 (deepseek2): multi-head latent attention (a low-rank
// query, or one projection in the lite models), then a dense FFN in the
// leading layers and experts with a selection bias and an ungated shared
// expert in the rest.
constexpr LayerTensor kLatentAttention[] = {
    {K::AttnNorm}, kOptional(K::AttnQ), kOptional(K::AttnQA), kOptional(K::AttnQANorm), kOptional(K::AttnQB),
    {K::AttnKvAMqa}, {K::AttnKvANorm}, {K::AttnKB}, {K::AttnVB}, {K::AttnOutput}};
constexpr LayerTensor kDenseFfn[] = {{K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}};
constexpr LayerTensor kBiasedExperts[] = {
    {K::FfnNorm}, {K::FfnGateInp}, kOptional(K::FfnExpProbsB), {K::FfnGateExps}, {K::FfnUpExps}, {K::FfnDownExps}};
// A layer's list from its token mixing and its FFN.
template <size_t A, size_t B>
constexpr std::array<LayerTensor, A + B> join(const LayerTensor (&a)[A], const LayerTensor (&b)[B]) {
  std::array<LayerTensor, A + B> out{};
  for (size_t i = 0; i < A; ++i) out[i] = a[i];
  for (size_t i = 0; i < B; ++i) out[A + i] = b[i];
  return out;
}
constexpr auto kDeepseek2Lead = join(kLatentAttention, kDenseFfn);
constexpr auto kDeepseek2Experts = join(kLatentAttention, kBiasedExperts);
constexpr LayerTensor kUngatedSharedExpert[] = {{K::FfnGateShexp}, {K::FfnUpShexp}, {K::FfnDownShexp}};

// GLM-4.5/4.6/4.7 (glm4moe): attention with biases and, where the file has
// them (GLM-4.5), per-head Q/K norms; leading dense layers, then experts as
// deepseek2's (sigmoid, selection bias, an ungated shared expert) but in one group.
constexpr LayerTensor kGlm4MoeAttention[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, kOptional(K::AttnQBias), kOptional(K::AttnKBias),
    kOptional(K::AttnVBias), kOptional(K::AttnQNorm), kOptional(K::AttnKNorm), {K::AttnOutput}};
constexpr auto kGlm4MoeLead = join(kGlm4MoeAttention, kDenseFfn);
constexpr auto kGlm4MoeExperts = join(kGlm4MoeAttention, kBiasedExperts);

// MiniMax M2: Q/K norms over the whole projection; experts in every layer,
// sigmoid with a selection bias, no shared expert.
constexpr LayerTensor kMiniMaxM2[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, {K::AttnV}, kOptional(K::AttnQBias), kOptional(K::AttnKBias),
    kOptional(K::AttnVBias), {K::AttnQNorm}, {K::AttnKNorm}, {K::AttnOutput}, {K::FfnNorm}, {K::FfnGateInp},
    {K::FfnExpProbsB}, {K::FfnGateExps}, {K::FfnUpExps}, {K::FfnDownExps}};

// Gemma 4: Gemma 3's layer, with V taken from K's projection where a
// layer has no attn_v (the global layers of the larger models) and a
// scalar on the layer's output; in the MoE model, experts beside the dense
// FFN (gate and up apart or stacked), each branch with its norms; in E2B
// and E4B, each layer's own input gated into the residual stream.
constexpr LayerTensor kGemma4Attention[] = {
    {K::AttnNorm}, {K::AttnQ}, {K::AttnK}, kOptional(K::AttnV), {K::AttnQNorm}, {K::AttnKNorm}, {K::AttnOutput},
    {K::AttnPostNorm}};
constexpr LayerTensor kGemma4Ffn[] = {
    {K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}, {K::FfnPostNorm}, kOptional(K::PerLayerInpGate),
    kOptional(K::PerLayerProj), kOptional(K::PerLayerPostNorm), kOptional(K::LayerOutScale)};
constexpr LayerTensor kGemma4Experts[] = {
    {K::FfnNorm}, {K::FfnGate}, {K::FfnUp}, {K::FfnDown}, {K::FfnPostNorm1}, {K::FfnGateInp}, {K::FfnGateInpScale},
    {K::FfnPreNorm2}, kOptional(K::FfnGateExps), kOptional(K::FfnUpExps), kOptional(K::FfnGateUpExps),
    {K::FfnDownExps}, kOptional(K::FfnDownExpsScale), {K::FfnPostNorm2}, {K::FfnPostNorm},
    kOptional(K::PerLayerInpGate), kOptional(K::PerLayerProj), kOptional(K::PerLayerPostNorm),
    kOptional(K::LayerOutScale)};
constexpr auto kGemma4 = join(kGemma4Attention, kGemma4Ffn);
constexpr auto kGemma4Moe = join(kGemma4Attention, kGemma4Experts);

using enum RopeStyle;
using enum Activation;
constexpr std::array kArchitectures = {
    // name        experts rope         activation scale_embd window period, layer
    Architecture{"llama", false, Interleaved, Silu, false, 0, kLlama},
    Architecture{"llama", true, Interleaved, Silu, false, 0, kLlamaExperts},  // Mixtral
    Architecture{"qwen2", false, Neox, Silu, false, 0, kQwen2},
    Architecture{"qwen3", false, Neox, Silu, false, 0, kQwen3},
    Architecture{.name = "qwen3moe", .experts = true, .rope_style = Neox, .activation = Silu,
                 .scale_embeddings = false, .sliding_window_period = 0, .layer_tensors = kQwen3Experts,
                 .expert_width_split = true},
    Architecture{"gemma3", false, Neox, GeluTanh, true, 6, kGemma3},
    Architecture{"qwen35", false, Neox, Silu, false, 0, kQwen35, kQwen35DeltaNet, true, "post_attention_norm.weight"},
    Architecture{.name = "qwen35moe", .experts = true, .rope_style = Neox, .activation = Silu,
                 .scale_embeddings = false, .sliding_window_period = 0, .layer_tensors = kQwen35Experts,
                 .recurrent_tensors = kQwen35DeltaNetExperts, .attention_output_gate = true,
                 .ffn_norm_name = "post_attention_norm.weight", .shared_expert_tensors = kSharedExpert,
                 .expert_width_split = true},
    Architecture{"gpt-oss", true, Neox, SiluOai, false, 2, kGptOss, {}, false, "post_attention_norm.weight", {}, true},
    Architecture{.name = "deepseek2", .experts = true, .rope_style = Interleaved, .activation = Silu,
                 .scale_embeddings = false, .sliding_window_period = 0, .layer_tensors = kDeepseek2Experts,
                 .shared_expert_tensors = kUngatedSharedExpert, .lead_tensors = kDeepseek2Lead,
                 .latent_attention = true, .routing_from_file = true},
    Architecture{.name = "qwen3next", .experts = true, .rope_style = Neox, .activation = Silu,
                 .scale_embeddings = false, .sliding_window_period = 0, .layer_tensors = kQwen35Experts,
                 .recurrent_tensors = kQwen3NextDeltaNet, .attention_output_gate = true,
                 .ffn_norm_name = "post_attention_norm.weight", .shared_expert_tensors = kSharedExpert,
                 .expert_width_split = true, .delta_keys_interleaved = true},
    Architecture{.name = "glm4moe", .experts = true, .rope_style = Neox, .activation = Silu,
                 .scale_embeddings = false, .sliding_window_period = 0, .layer_tensors = kGlm4MoeExperts,
                 .ffn_norm_name = "post_attention_norm.weight", .shared_expert_tensors = kUngatedSharedExpert,
                 .lead_tensors = kGlm4MoeLead, .routing_from_file = true, .expert_width_split = true,
                 .default_expert_gating = 2},
    Architecture{.name = "minimax-m2", .experts = true, .rope_style = Neox, .activation = Silu,
                 .scale_embeddings = false, .sliding_window_period = 0, .layer_tensors = kMiniMaxM2,
                 .routing_from_file = true, .default_expert_gating = 2, .expert_weights_always_norm = true,
                 .qk_norm_whole = true},
    Architecture{.name = "gemma4", .experts = false, .rope_style = Neox, .activation = GeluTanh,
                 .scale_embeddings = true, .sliding_window_period = 6, .layer_tensors = kGemma4,
                 .window_geometry = true, .value_norm = true, .attention_scale = 1.0f},
    Architecture{.name = "gemma4", .experts = true, .rope_style = Neox, .activation = GeluTanh,
                 .scale_embeddings = true, .sliding_window_period = 6, .layer_tensors = kGemma4Moe,
                 .window_geometry = true, .value_norm = true, .attention_scale = 1.0f},
};

}  // namespace

std::string supported_architectures() {
  std::string out;
  std::string_view previous;
  for (const auto& a : kArchitectures) {
    if (a.name != previous) out += (out.empty() ? "" : ", ") + std::string(a.name);  // llama twice: with experts
    previous = a.name;
  }
  return out;
}

const Architecture& find_architecture(const std::string& name, bool experts, const std::string& source) {
  bool known = false;
  for (const auto& a : kArchitectures) {
    if (a.name != name) continue;
    known = true;
    if (a.experts == experts) return a;
  }
  if (known)
    fail("{}: architecture '{}' {} experts is not supported (supported: {})", source, name,
         experts ? "with" : "without", supported_architectures());
  fail("{}: unsupported architecture '{}' (supported: {})", source, name, supported_architectures());
}

}  // namespace shoal
