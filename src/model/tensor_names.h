#pragma once
// Every GGUF tensor a model may have, with its name and shape, in one table
// (blk.3.attn_norm.weight = tensor_name(TensorKind::AttnNorm, 3)). What a
// given architecture's layer holds is model/architecture.h's business.
#include <optional>
#include <string>
#include <string_view>

namespace shoal {

enum class TensorKind {
  // Whole-model tensors; Gemma 4 E2B/E4B's per-layer inputs (a token's
  // rows for every layer, the projection of its embedding to them, their norm).
  TokenEmbd, OutputNorm, Output, RopeFreqs, PerLayerTokenEmbd, PerLayerModelProj, PerLayerProjNorm,
  // Per-layer tensors (kinds from AttnNorm on).
  AttnNorm, AttnQ, AttnK, AttnV, AttnQBias, AttnKBias, AttnVBias, AttnQNorm, AttnKNorm, AttnOutput, AttnPostNorm,
  FfnNorm, FfnGate, FfnUp, FfnDown, FfnGateInp, FfnGateExps, FfnUpExps, FfnDownExps, FfnPostNorm,
  // Gated DeltaNet layers (qwen35): the joint q/k/v projection, the output
  // gate, the causal convolution, the per-head decay (dt bias, A) and
  // write strength (beta) projections, the per-head norm, the output.
  AttnQkv, AttnGate, SsmConv1d, SsmDt, SsmA, SsmBeta, SsmAlpha, SsmNorm, SsmOut,
  // A shared expert beside the routed ones (qwen35moe), scaled by
  // sigmoid(ffn_gate_inp_shexp . x).
  FfnGateInpShexp, FfnGateShexp, FfnUpShexp, FfnDownShexp,
  // gpt-oss: the output projection's bias, attention sinks (a logit per
  // head), the router's and each expert's biases.
  AttnOutputBias, AttnSinks, FfnGateInpBias, FfnGateExpsBias, FfnUpExpsBias, FfnDownExpsBias,
  // Multi-head latent attention (deepseek2): the query's low-rank pair and
  // its norm, the joint latent + rope-key projection and the latent's norm,
  // each head's absorbed key (latent <- nope query) and value (latent ->
  // value) matrices; the router's selection bias.
  AttnQA, AttnQANorm, AttnQB, AttnKvAMqa, AttnKvANorm, AttnKB, AttnVB, FfnExpProbsB,
  // Qwen3-Next: the DeltaNet's beta and alpha projections in one matrix,
  // grouped by key head ([beta x r | alpha x r] per key head, r value heads each).
  SsmBetaAlpha,
  // A multi-token-prediction block's own (nextn, read by the MTP draft only):
  // the projection of the normed embedding and hidden state side by side,
  // the norm of each, and the norm before the shared output head.
  NextnEhProj, NextnEnorm, NextnHnorm, NextnSharedHeadNorm,
  // Gemma 4: a layer's output scalar; beside a dense FFN, experts with norms
  // of their own (before them, after each), the router's input scale, each
  // expert's output scale, and gate and up stacked in one tensor per expert.
  LayerOutScale, FfnPreNorm2, FfnPostNorm1, FfnPostNorm2, FfnGateInpScale, FfnDownExpsScale, FfnGateUpExps,
  // Gemma 4 E2B/E4B: a layer's gate from the residual to its per-layer
  // input, the projection back, and its norm.
  PerLayerInpGate, PerLayerProj, PerLayerPostNorm,
  COUNT  // sentinel
};
constexpr int kFirstLayerKind = static_cast<int>(TensorKind::AttnNorm);
constexpr int kLayerKindCount = static_cast<int>(TensorKind::COUNT) - kFirstLayerKind;
constexpr int layer_slot(TensorKind k) { return static_cast<int>(k) - kFirstLayerKind; }

// A tensor dimension, resolved against a ModelConfig (model/config.h).
// QProj: the Q projection's rows (q_width, twice that with an output gate);
// the Ssm* and Conv* ones: DeltaNet's (model/config.h, DeltaNetShape);
// AttnOut: the output projection's input (q_width, or n_head value heads
// under latent attention); QLora, KvLora, QkNope, MlaValue: latent
// attention's ranks and head parts (model/config.h, LatentAttentionShape);
// QNorm, KNorm: a Q/K norm's width, a head's or the whole projection's
// (minimax-m2); SsmHeadPairs: a beta and an alpha per DeltaNet head;
// EmbdPair: two residual rows side by side (the MTP block's projection);
// FfExpertPair: an expert's gate and up rows stacked (gemma4); PerLayer:
// one layer's input width, PerLayerAll: every layer's (gemma4 E2B/E4B).
// The attention dims of a layer follow its geometry (ModelConfig::attention_of).
enum class Dim { One, Embd, Vocab, QWidth, QProj, KvWidth, Heads, HeadDim, Ff, FfExpert, FfShared, Experts, RopeHalf,
                 ConvKernel, ConvWidth, ValueWidth, SsmHeads, SsmHeadDim, AttnOut, QLora, KvLora, QkNope, MlaValue,
                 QNorm, KNorm, SsmHeadPairs, EmbdPair, FfExpertPair, PerLayer, PerLayerAll };

struct TensorSpec {
  TensorKind kind;
  const char* name;   // GGUF name; per-layer tensors are blk.<layer>.<name>
  bool per_layer;
  Dim dims[3];        // GGUF order: dims[0] is the row length; Dim::One pads
  bool f32_only;      // norms and biases are read as floats directly
};

const TensorSpec& tensor_spec(TensorKind kind);
// The GGUF name of a tensor; `layer` is ignored for whole-model tensors.
std::string tensor_name(TensorKind kind, int layer = -1);
// The per-layer kind whose name (without blk.N.) is `name`.
std::optional<TensorKind> layer_kind_named(std::string_view name);

}  // namespace shoal
