#include "model/config.h"

#include <cmath>

#include "gguf/reader.h"
#include "util/error.h"

namespace shoal {
namespace {

// Which layers attend through a sliding window, as llama.cpp reads
// `attention.sliding_window_pattern`: an array of bools (true: windowed), or
// a period n (every n-th layer is global), else the architecture's period.
std::vector<bool> windowed_layers(const gguf::File& f, const std::string& key, int n_layer, int period) {
  std::vector<bool> out(n_layer, false);
  if (const gguf::Value* v = f.find(key); v && v->is_array()) {
    const gguf::Array& a = v->as_array(key);
    if (static_cast<int>(a.items.size()) < n_layer) fail("{}: {} has {} entries for {} layers", f.path(), key,
                                                         a.items.size(), n_layer);
    for (int l = 0; l < n_layer; ++l) out[l] = a.items[l].as_bool(key);
    return out;
  }
  if (const gguf::Value* v = f.find(key)) {
    const int64_t p = v->as_int(key);
    if (p < 0 || p > n_layer) fail("{}: bad {} {}", f.path(), key, p);
    period = static_cast<int>(p);
  }
  for (int l = 0; l < n_layer; ++l) out[l] = period == 0 || l % period < period - 1;
  return out;
}

// Qwen3.5's rope rotates by up to four position streams (multi-section
// rope, interleaved: pair i of the rotated dims follows stream i % 3 while
// i stays within three times that stream's section). For text the first
// three streams are the token's position and the fourth is 0, as llama.cpp
// feeds them; so text gets plain (neox) rope exactly when no rotated pair
// falls to the fourth stream. Refused by name otherwise.
void check_rope_sections(const gguf::File& f, const std::string& key, int rope_dim) {
  const gguf::Value* v = f.find(key);
  if (!v) return;
  const gguf::Array& a = v->as_array(key);
  int sections[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < a.items.size() && i < 4; ++i) sections[i] = static_cast<int>(a.items[i].as_int(key));
  const int total = sections[0] + sections[1] + sections[2] + sections[3];
  if (total <= 0) fail("{}: {} sums to {}", f.path(), key, total);
  for (int pair = 0; pair < rope_dim / 2; ++pair) {
    const int sector = pair % total;
    const int stream = sector % 3;
    if (sector >= 3 * sections[stream])
      fail("{}: rope sections [{}, {}, {}, {}] rotate pair {} by the fourth position stream, which Shoal does not run",
           f.path(), sections[0], sections[1], sections[2], sections[3], pair);
  }
}

// The DeltaNet sizes and which layers are DeltaNets: the file's
// attention.recurrent_layers (bools), else every layer but each
// full_attention_interval-th (4 unless the file says), as llama.cpp reads them.
void read_delta_net(const gguf::File& f, ModelConfig& c) {
  auto key = [&](const char* suffix) { return c.arch + "." + suffix; };
  DeltaNetShape& d = c.delta;
  d.conv_kernel = static_cast<int>(f.get_int(key("ssm.conv_kernel")));
  d.head_dim = static_cast<int>(f.get_int(key("ssm.state_size")));
  d.n_k_heads = static_cast<int>(f.get_int(key("ssm.group_count")));
  d.n_v_heads = static_cast<int>(f.get_int(key("ssm.time_step_rank")));
  const int64_t inner = f.get_int(key("ssm.inner_size"));
  if (d.n_v_heads <= 0 || inner != static_cast<int64_t>(d.head_dim) * d.n_v_heads)
    fail("{}: ssm.inner_size {} is not ssm.state_size {} x ssm.time_step_rank {}", f.path(), inner, d.head_dim,
         d.n_v_heads);
  std::vector<bool> recurrent(c.n_layer, false);
  if (const gguf::Value* v = f.find(key("attention.recurrent_layers"))) {
    const gguf::Array& a = v->as_array(key("attention.recurrent_layers"));
    if (static_cast<int>(a.items.size()) < c.n_layer)
      fail("{}: attention.recurrent_layers has {} entries for {} layers", f.path(), a.items.size(), c.n_layer);
    for (int l = 0; l < c.n_layer; ++l) recurrent[l] = a.items[l].as_bool(key("attention.recurrent_layers"));
  } else {
    const int64_t interval = f.get_int(key("full_attention_interval"), 4);
    if (interval <= 0 || interval > c.n_layer) fail("{}: bad full_attention_interval {}", f.path(), interval);
    for (int l = 0; l < c.n_layer; ++l) recurrent[l] = (l + 1) % interval != 0;
  }
  for (int l = 0; l < c.n_layer; ++l)
    if (recurrent[l]) c.layers[l].kind = LayerKind::DeltaNet;
  check_rope_sections(f, key("rope.dimension_sections"), c.rope_dim);
}

// Latent attention's sizes (deepseek2), as llama.cpp reads them: the
// file's key_length / value_length are the cached row's (latent + rope) and
// the latent's; key_length_mla / value_length_mla are a head's query and
// value. Files from before the split of attn_kv_b lack the _mla keys.
void read_latent_attention(const gguf::File& f, ModelConfig& c) {
  auto key = [&](const char* suffix) { return c.arch + "." + suffix; };
  if (!f.find(key("attention.key_length_mla")) || f.find_tensor("blk.0.attn_kv_b.weight"))
    fail("{}: a deepseek2 file without attention.key_length_mla and split attn_k_b / attn_v_b (converted before "
         "llama.cpp's MLA cache): convert it again with a current convert_hf_to_gguf.py",
         f.path());
  if (f.find(key("attention.temperature_scale")))
    fail("{}: attention temperature scaling (attention.temperature_scale) is not supported", f.path());
  LatentAttentionShape& a = c.mla;
  a.q_lora_rank = static_cast<int>(f.get_int(key("attention.q_lora_rank"), 0));
  a.kv_lora_rank = static_cast<int>(f.get_int(key("attention.kv_lora_rank")));
  a.qk_nope = static_cast<int>(f.get_int(key("attention.key_length_mla"))) - c.rope_dim;
  a.v_head_dim = static_cast<int>(f.get_int(key("attention.value_length_mla")));
  if (f.get_int(key("attention.value_length"), a.kv_lora_rank) != a.kv_lora_rank)
    fail("{}: attention.value_length {} is not the latent's kv_lora_rank {}", f.path(),
         f.get_int(key("attention.value_length")), a.kv_lora_rank);
  // The key's scale is a head's query size, not the cached row's; YaRN's
  // multiplier strengthens it (llama.cpp's kq_scale for deepseek2).
  const float freq_scale = c.layers.empty() ? 1.0f : c.layers[0].rope_freq_scale;
  const float log_mul = static_cast<float>(f.get_float(key("rope.scaling.yarn_log_multiplier"), 0.0)) / 0.1f;
  const float ln = std::log(1.0f / freq_scale);
  const float mscale = c.yarn.attn_factor * (1.0f + 0.1f * ln) * (1.0f + 0.1f * log_mul * ln);
  c.attn_scale = mscale * mscale / std::sqrt(static_cast<float>(a.qk_nope + c.rope_dim));
}

// The router as the file describes it (deepseek2 and kin; llama.cpp reads
// these keys for those only): gating function (1 softmax, 2 sigmoid; a file
// without the key gets the architecture's default, and deepseek2's is
// softmax except for GLM-4.7-Flash, recognised by its depth and vocabulary
// as llama.cpp does), weight normalisation and scale.
void read_routing(const gguf::File& f, const Architecture& arch, ModelConfig& c) {
  auto key = [&](const char* suffix) { return c.arch + "." + suffix; };
  int64_t gating = f.get_int(key("expert_gating_func"), 0);
  if (gating == 0) gating = arch.latent_attention && (c.n_layer == 47 || c.n_layer == 48) && c.n_vocab == 154880
                                ? 2 : arch.default_expert_gating;
  if (gating != 1 && gating != 2)
    fail("{}: expert_gating_func {} is not supported (1: softmax, 2: sigmoid)", f.path(), gating);
  c.expert_gating = gating == 2 ? ExpertGating::Sigmoid : ExpertGating::Softmax;
  c.expert_weights_norm = arch.expert_weights_always_norm || f.get_bool(key("expert_weights_norm"), false);
  c.expert_weights_scale = static_cast<float>(f.get_float(key("expert_weights_scale"), 1.0));
  if (c.expert_weights_scale == 0.0f) c.expert_weights_scale = 1.0f;  // llama.cpp skips a zero scale
  c.n_ff_shexp = c.n_ff_exp * static_cast<int>(f.get_int(key("expert_shared_count"), 0));
}

// YaRN's parameters as llama.cpp derives them (llama_context's
// constructor): ext_factor 1 for yarn unless the file says; the magnitude
// scale attn_factor that, with ggml's own 1 + 0.1 ln(factor), comes to
// mscale(factor, m) / mscale(factor, m_all) (m_all: the file's
// yarn_log_multiplier, 1 without it), times the file's attn_factor.
//
// DeepSeek's files store 0.1 x mscale_all_dim as the multiplier and its
// models take mscale = mscale_all_dim, so the ratio is 1 there; the
// multiplier scales the attention instead (latent_attention_scale).
RopeYarn read_yarn(const gguf::File& f, const ModelConfig& c, const std::string& scaling, float freq_scale) {
  auto key = [&](const char* suffix) { return c.arch + "." + suffix; };
  const bool deepseek = c.arch == "deepseek2";
  RopeYarn y;
  y.ext_factor = static_cast<float>(f.get_float(key("rope.scaling.yarn_ext_factor"), scaling == "yarn" ? 1.0 : 0.0));
  y.beta_fast = static_cast<float>(f.get_float(key("rope.scaling.yarn_beta_fast"), 32.0));
  y.beta_slow = static_cast<float>(f.get_float(key("rope.scaling.yarn_beta_slow"), 1.0));
  y.orig_ctx = static_cast<int>(f.get_int(key("rope.scaling.original_context_length"), c.n_ctx_train));
  if (y.ext_factor != 0.0f) {
    const float factor = 1.0f / freq_scale;
    auto mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; };
    float log_mul = static_cast<float>(f.get_float(key("rope.scaling.yarn_log_multiplier"), 0.0));
    if (deepseek) log_mul /= 0.1f;
    const float m = deepseek && log_mul != 0.0f ? log_mul : 1.0f;
    y.attn_factor = log_mul != 0.0f ? mscale(factor, m) / mscale(factor, log_mul) : mscale(factor, 1.0f);
    y.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));  // ggml multiplies this back in
  }
  y.attn_factor *= static_cast<float>(f.get_float(key("rope.scaling.attn_factor"), 1.0));
  return y;  // checked by validate()
}

// A key that is one integer or one per layer (llama.cpp's get_key_or_arr),
// as n_layer values; `fallback` where the file lacks it.
std::vector<int> per_layer_ints(const gguf::File& f, const std::string& key, int n_layer, int fallback) {
  std::vector<int> out(n_layer, fallback);
  const gguf::Value* v = f.find(key);
  if (!v) return out;
  if (!v->is_array()) {
    std::fill(out.begin(), out.end(), static_cast<int>(v->as_int(key)));
    return out;
  }
  const gguf::Array& a = v->as_array(key);
  if (static_cast<int>(a.items.size()) < n_layer)
    fail("{}: {} has {} entries for {} layers", f.path(), key, a.items.size(), n_layer);
  for (int l = 0; l < n_layer; ++l) out[l] = static_cast<int>(a.items[l].as_int(key));
  return out;
}

// The one value every layer of a kind has in a per-layer key; throws
// naming the key where they differ (Shoal sizes such layers alike).
int one_value(const gguf::File& f, const std::string& key, const std::vector<int>& values, const std::vector<bool>& pick,
              bool picked, int fallback) {
  int found = -1;
  for (size_t l = 0; l < values.size(); ++l) {
    if (pick[l] != picked) continue;
    if (found >= 0 && values[l] != found)
      fail("{}: {} differs between layers of one kind ({} and {}), which Shoal does not run", f.path(), key, found,
           values[l]);
    found = values[l];
  }
  return found < 0 ? fallback : found;
}

// Gemma 4's windowed layers attend with a geometry of their own, as
// llama.cpp reads it: key_length_swa (= value_length_swa), the windowed
// layers' entries of head_count_kv, rope.dimension_count_swa (default: the
// global rope's); and E2B/E4B's last layers reuse an earlier layer's
// cache (attention.shared_kv_layers) and every layer has an input of its
// own (embedding_length_per_layer_input, required as llama.cpp requires it).
void read_window_geometry(const gguf::File& f, ModelConfig& c, const std::vector<int>& kv_heads,
                          const std::vector<bool>& windowed) {
  auto key = [&](const char* suffix) { return c.arch + "." + suffix; };
  const int64_t shared = f.get_int(key("attention.shared_kv_layers"), 0);
  if (shared < 0 || (shared > 0 && shared > c.n_layer - 2)) fail("{}: bad attention.shared_kv_layers {}", f.path(), shared);
  c.n_kv_shared = static_cast<int>(shared);
  const int64_t per_layer = f.get_int(key("embedding_length_per_layer_input"));
  if (per_layer < 0 || per_layer > 4096) fail("{}: bad embedding_length_per_layer_input {}", f.path(), per_layer);
  c.n_embd_per_layer = static_cast<int>(per_layer);
  AttentionGeometry g;
  g.head_dim = static_cast<int>(f.get_int(key("attention.key_length_swa"), c.head_dim));
  if (f.get_int(key("attention.value_length_swa"), g.head_dim) != g.head_dim)
    fail("{}: windowed key and value heads of different sizes are not supported", f.path());
  g.rope_dim = static_cast<int>(f.get_int(key("rope.dimension_count_swa"), c.rope_dim));
  g.n_head_kv = one_value(f, key("attention.head_count_kv"), kv_heads, windowed, true, c.n_head_kv);
  if (std::find(windowed.begin(), windowed.end(), true) != windowed.end() &&
      g != AttentionGeometry{c.n_head_kv, c.head_dim, c.rope_dim})
    c.window_geometry = g;
}

}  // namespace

int64_t ModelConfig::dim(Dim d, int layer) const {
  const AttentionGeometry g = attention_of(layer);
  switch (d) {
    case Dim::One: return 1;
    case Dim::Embd: return n_embd;
    case Dim::Vocab: return n_vocab;
    case Dim::QWidth: return q_width(layer);
    case Dim::QProj: return q_proj_width(layer);
    case Dim::Heads: return n_head;
    case Dim::KvWidth: return kv_width(layer);
    case Dim::HeadDim: return g.head_dim;
    case Dim::Ff: return ff_width(layer);
    case Dim::FfExpert: return n_ff_exp;
    case Dim::FfShared: return n_ff_shexp;
    case Dim::Experts: return n_expert;
    case Dim::RopeHalf: return rope_dim / 2;
    case Dim::ConvKernel: return delta.conv_kernel;
    case Dim::ConvWidth: return delta.conv_width();
    case Dim::ValueWidth: return delta.value_width();
    case Dim::SsmHeads: return delta.n_v_heads;
    case Dim::SsmHeadDim: return delta.head_dim;
    case Dim::AttnOut: return attn_out_width(layer);
    case Dim::QLora: return mla.q_lora_rank;
    case Dim::KvLora: return mla.kv_lora_rank;
    case Dim::QkNope: return mla.qk_nope;
    case Dim::MlaValue: return mla.v_head_dim;
    case Dim::QNorm: return qk_norm_whole ? q_width(layer) : g.head_dim;
    case Dim::KNorm: return qk_norm_whole ? kv_width(layer) : g.head_dim;
    case Dim::SsmHeadPairs: return 2 * delta.n_v_heads;
    case Dim::EmbdPair: return 2 * n_embd;
    case Dim::FfExpertPair: return 2 * n_ff_exp;
    case Dim::PerLayer: return n_embd_per_layer;
    case Dim::PerLayerAll: return side_width();
  }
  return 0;
}

std::string ModelConfig::tensor_name(TensorKind kind, int layer) const {
  if (kind == TensorKind::FfnNorm) return "blk." + std::to_string(layer) + "." + ffn_norm_name;
  return shoal::tensor_name(kind, layer);
}

void ModelConfig::validate() const {
  if (n_layer <= 0 || n_layer > 4096) fail("bad block_count {}", n_layer);
  // No dense FFN at all (experts in every layer) may leave its width 0.
  const bool dense_ffn = !has(TensorKind::FfnGateInp) || n_dense_lead > 0;
  if (n_embd <= 0 || n_embd > 65536 || n_head <= 0 || n_head > 1024 || n_head_kv <= 0 || n_ff < 0 ||
      (dense_ffn && n_ff == 0) || n_ff > (1 << 20) || n_vocab <= 0)
    fail("bad dimensions (embedding {}, heads {}/{}, ffn {}, vocabulary {})", n_embd, n_head, n_head_kv, n_ff,
         n_vocab);
  if (n_head % n_head_kv != 0) fail("head_count {} is not a multiple of head_count_kv {}", n_head, n_head_kv);
  if (head_dim <= 0 || head_dim > (latent_attention() ? 576 : 512) || head_dim % 2 != 0)
    fail("unsupported head size {}", head_dim);
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    fail("bad rope dimension {} for head size {}", rope_dim, head_dim);
  if (!(attn_scale > 0.0f) || !std::isfinite(attn_scale) || !std::isfinite(embd_scale) ||
      !(logit_softcap >= 0.0f) || !std::isfinite(logit_softcap) || !std::isfinite(expert_weights_scale))
    fail("bad attention, embedding, logit or expert scale");
  const bool moe = has(TensorKind::FfnGateInp);
  if (moe && (n_expert < 1 || n_expert > 1024 || n_expert_used < 1 || n_expert_used > n_expert || n_ff_exp <= 0 ||
              n_ff_exp > (1 << 20)))
    fail("bad experts: {} of {} used, expert width {}", n_expert_used, n_expert, n_ff_exp);
  if (!moe && (n_expert != 0 || n_ff_exp != 0)) fail("{} experts of width {} but no router tensor", n_expert, n_ff_exp);
  const bool shared = has(TensorKind::FfnGateShexp);
  if (shared != (n_ff_shexp > 0) || n_ff_shexp < 0 || n_ff_shexp > (1 << 20) || (shared && !moe))
    fail("bad shared expert (width {})", n_ff_shexp);
  if (static_cast<int>(layers.size()) != n_layer) fail("{} layer settings for {} layers", layers.size(), n_layer);
  if (!(yarn.ext_factor >= 0.0f && yarn.ext_factor <= 1.0f) || !(yarn.attn_factor > 0.0f) ||
      !std::isfinite(yarn.attn_factor) || !std::isfinite(yarn.beta_fast) || !std::isfinite(yarn.beta_slow) ||
      (yarn.ext_factor != 0.0f && (yarn.orig_ctx <= 0 || !(yarn.beta_fast > 0.0f) || !(yarn.beta_slow > 0.0f))))
    fail("bad YaRN parameters (ext_factor {}, attn_factor {}, original context {}, beta {} / {})", yarn.ext_factor,
         yarn.attn_factor, yarn.orig_ctx, yarn.beta_fast, yarn.beta_slow);
  for (const LayerSettings& l : layers)
    if (l.window < 0 || l.window > (1 << 20) || !(l.rope_freq_base > 0.0f) || !std::isfinite(l.rope_freq_base) ||
        !(l.rope_freq_scale > 0.0f) || !std::isfinite(l.rope_freq_scale))
      fail("bad layer settings (window {}, rope base {}, scale {})", l.window, l.rope_freq_base, l.rope_freq_scale);
  for (const auto* list : {&layer_tensors, &recurrent_tensors})
    for (size_t i = 0; i < list->size(); ++i)
      if (static_cast<int>((*list)[i]) < kFirstLayerKind ||
          std::find(list->begin(), list->begin() + i, (*list)[i]) != list->begin() + i)
        fail("bad layer tensor list");
  if (ffn_norm_name != "ffn_norm.weight" && ffn_norm_name != "post_attention_norm.weight")
    fail("bad FFN norm name '{}'", ffn_norm_name);
  const bool any_recurrent = std::any_of(layers.begin(), layers.end(), [](const LayerSettings& l) {
    return l.kind == LayerKind::DeltaNet;
  });
  if (any_recurrent != has_recurrent_layers()) fail("DeltaNet layers without their tensors, or the reverse");
  if (has_recurrent_layers()) {
    const DeltaNetShape& d = delta;
    if (d.conv_kernel < 2 || d.conv_kernel > 16 || d.head_dim <= 0 || d.head_dim > 512 || d.n_k_heads <= 0 ||
        d.n_v_heads <= 0 || d.n_v_heads > 1024 || d.n_v_heads % d.n_k_heads != 0)
      fail("bad DeltaNet sizes (convolution {}, head size {}, {} key and {} value heads)", d.conv_kernel, d.head_dim,
           d.n_k_heads, d.n_v_heads);
    auto recurrent_has = [&](TensorKind k) {
      return std::find(recurrent_tensors.begin(), recurrent_tensors.end(), k) != recurrent_tensors.end();
    };
    for (TensorKind k : {TensorKind::AttnNorm, TensorKind::AttnQkv, TensorKind::AttnGate, TensorKind::SsmConv1d,
                         TensorKind::SsmDt, TensorKind::SsmA, TensorKind::SsmNorm, TensorKind::SsmOut,
                         TensorKind::FfnNorm})
      if (!recurrent_has(k)) fail("a DeltaNet layer without {}", tensor_spec(k).name);
    // beta and alpha: two projections, or one of both (qwen3next).
    const bool apart = recurrent_has(TensorKind::SsmBeta) && recurrent_has(TensorKind::SsmAlpha);
    const bool joint = recurrent_has(TensorKind::SsmBetaAlpha);
    if (apart == joint || (joint && (recurrent_has(TensorKind::SsmBeta) || recurrent_has(TensorKind::SsmAlpha))))
      fail("a DeltaNet layer needs ssm_beta and ssm_alpha, or ssm_ba, and not both");
    // Its feed-forward block is the attention layers' (the same list from FfnNorm on).
    auto ffn_of = [](const std::vector<TensorKind>& list) {
      return std::vector<TensorKind>(std::find(list.begin(), list.end(), TensorKind::FfnNorm), list.end());
    };
    if (ffn_of(recurrent_tensors) != ffn_of(layer_tensors)) fail("DeltaNet and attention layers with different FFNs");
  }
  if (n_expert_groups != 0 &&
      (n_expert_groups < 2 || n_expert % n_expert_groups != 0 || n_expert / n_expert_groups < 2 ||
       n_group_used < 1 || n_group_used >= n_expert_groups || n_group_used * (n_expert / n_expert_groups) < n_expert_used))
    fail("bad expert groups: {} experts in {} groups, {} groups used, {} experts used", n_expert, n_expert_groups,
         n_group_used, n_expert_used);
  if (n_dense_lead < 0 || n_dense_lead > n_layer || (n_dense_lead > 0) == lead_tensors.empty())
    fail("bad leading dense layers ({} of {}, {} tensors)", n_dense_lead, n_layer, lead_tensors.size());
  for (size_t i = 0; i < lead_tensors.size(); ++i)
    if (static_cast<int>(lead_tensors[i]) < kFirstLayerKind ||
        std::find(lead_tensors.begin(), lead_tensors.begin() + i, lead_tensors[i]) != lead_tensors.begin() + i)
      fail("bad leading layer tensor list");
  if (n_dense_lead > 0) {
    // The leading layers attend as the others and have a dense FFN.
    auto before_ffn = [](const std::vector<TensorKind>& list) {
      return std::vector<TensorKind>(list.begin(), std::find(list.begin(), list.end(), TensorKind::FfnNorm));
    };
    const auto has_lead = [&](TensorKind k) { return std::find(lead_tensors.begin(), lead_tensors.end(), k) != lead_tensors.end(); };
    if (before_ffn(lead_tensors) != before_ffn(layer_tensors) || !has_lead(TensorKind::FfnNorm) ||
        !has_lead(TensorKind::FfnGate) || !has_lead(TensorKind::FfnUp) || !has_lead(TensorKind::FfnDown) ||
        has_lead(TensorKind::FfnGateInp))
      fail("leading dense layers that differ from the others before their FFN, or without a dense FFN");
  }
  if (latent_attention()) {
    const LatentAttentionShape& a = mla;
    if (a.kv_lora_rank <= 0 || a.kv_lora_rank > 4096 || a.qk_nope <= 0 || a.qk_nope > 1024 || a.v_head_dim <= 0 ||
        a.v_head_dim > 1024 || a.q_lora_rank < 0 || a.q_lora_rank > 65536 || n_head_kv != 1 ||
        head_dim != a.kv_lora_rank + rope_dim || a.kv_lora_rank % 8 != 0)
      fail("bad latent attention sizes (latent {}, query rank {}, nope {}, rope {}, value {}, cached row {}, {} KV heads)",
           a.kv_lora_rank, a.q_lora_rank, a.qk_nope, rope_dim, a.v_head_dim, head_dim, n_head_kv);
    const bool low_rank = has(TensorKind::AttnQA) && has(TensorKind::AttnQANorm) && has(TensorKind::AttnQB);
    if (low_rank == has(TensorKind::AttnQ) || low_rank != (a.q_lora_rank > 0) ||
        has(TensorKind::AttnQA) != low_rank || has(TensorKind::AttnQB) != low_rank)
      fail("latent attention needs either attn_q or attn_q_a, attn_q_a_norm and attn_q_b (query rank {})",
           a.q_lora_rank);
    for (TensorKind k : {TensorKind::AttnNorm, TensorKind::AttnKvAMqa, TensorKind::AttnKvANorm, TensorKind::AttnKB,
                         TensorKind::AttnVB, TensorKind::AttnOutput, TensorKind::FfnNorm})
      if (!has(k)) fail("a latent attention layer without {}", tensor_spec(k).name);
    if (has(TensorKind::AttnK) || has(TensorKind::AttnV) || has(TensorKind::AttnQNorm) || q_gate)
      fail("latent attention with separate K/V projections, Q/K norms or an output gate");
  } else {
    for (TensorKind k : {TensorKind::AttnNorm, TensorKind::AttnQ, TensorKind::AttnK, TensorKind::AttnOutput,
                         TensorKind::FfnNorm})
      if (!has(k)) fail("a layer without {}", tensor_spec(k).name);
    // V comes from its own projection, or from K's where the value norm makes them differ (gemma4).
    if (!has(TensorKind::AttnV) && !v_norm) fail("a layer without attn_v");
    for (TensorKind k : {TensorKind::AttnQA, TensorKind::AttnQANorm, TensorKind::AttnQB, TensorKind::AttnKvAMqa,
                         TensorKind::AttnKvANorm, TensorKind::AttnKB, TensorKind::AttnVB})
      if (has(k)) fail("{} outside latent attention", tensor_spec(k).name);
  }
  const bool dense = has(TensorKind::FfnGate) && has(TensorKind::FfnUp) && has(TensorKind::FfnDown);
  const bool apart = has(TensorKind::FfnGateExps) && has(TensorKind::FfnUpExps);
  const bool stacked = has(TensorKind::FfnGateUpExps);
  const bool experts = apart != stacked && !(stacked && (has(TensorKind::FfnGateExps) || has(TensorKind::FfnUpExps))) &&
                       has(TensorKind::FfnDownExps);
  if (moe ? !experts : !dense) fail("a layer without a complete feed-forward block");
  // Gemma 4's experts beside a dense FFN, each branch normalised before and after.
  const bool beside = has(TensorKind::FfnPreNorm2);
  if (beside && (!moe || !dense || !has(TensorKind::FfnPostNorm1) || !has(TensorKind::FfnPostNorm2)))
    fail("experts beside a dense FFN need the router, the dense FFN and pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2");
  if (!(router_input_scale >= 0.0f) || !std::isfinite(router_input_scale) ||
      (router_input_scale > 0.0f) != has(TensorKind::FfnGateInpScale))
    fail("a router input scale without ffn_gate_inp.scale, or the reverse");
  if (!uniform_attention()) {
    const AttentionGeometry& g = window_geometry;
    if (g.n_head_kv <= 0 || n_head % g.n_head_kv != 0 || g.head_dim <= 0 || g.head_dim > 512 || g.head_dim % 2 != 0 ||
        g.rope_dim <= 0 || g.rope_dim > g.head_dim || g.rope_dim % 2 != 0 || latent_attention() || q_gate ||
        qk_norm_whole || has_recurrent_layers())
      fail("bad windowed attention geometry ({} KV heads of {}, rope over {})", g.n_head_kv, g.head_dim, g.rope_dim);
  }
  if (n_embd_per_layer < 0 || n_embd_per_layer > 4096 || side_width() > (1 << 20) ||
      (n_embd_per_layer > 0) != (has(TensorKind::PerLayerInpGate) && has(TensorKind::PerLayerProj) &&
                                 has(TensorKind::PerLayerPostNorm)))
    fail("bad per-layer inputs ({} values a layer) or their tensors", n_embd_per_layer);
  if (n_kv_shared < 0 || (n_kv_shared > 0 && n_kv_shared > n_layer - 2) || n_ff_shared < 0 || n_ff_shared > (1 << 20) ||
      (n_ff_shared > 0 && n_kv_shared == 0) || (n_kv_shared > 0) == reuse_tensors.empty())
    fail("bad layers that reuse a cache ({} of {}, FFN {})", n_kv_shared, n_layer, n_ff_shared);
  for (int l = n_layer - n_kv_shared; l < n_layer && n_kv_shared > 0; ++l) {
    const int source = kv_source(l);
    if (source < 0 || recurrent(source) || recurrent(l) || windowed(source) != windowed(l) ||
        layers[source].window != layers[l].window || kv_source(source) >= 0 || latent_attention())
      fail("layer {} would read layer {}'s cache, which is not an attention layer of its kind", l, source);
  }
  for (TensorKind k : reuse_tensors)
    if (k == TensorKind::AttnK || k == TensorKind::AttnV || k == TensorKind::AttnKNorm ||
        std::find(layer_tensors.begin(), layer_tensors.end(), k) == layer_tensors.end())
      fail("a layer that reuses a cache with {}", tensor_spec(k).name);
  if (!global_tensors.empty()) {
    // The global layers differ only in taking V from K's projection.
    std::vector<TensorKind> without_v = layer_tensors;
    std::erase(without_v, TensorKind::AttnV);
    if (global_tensors != without_v || global_tensors == layer_tensors || !v_norm)
      fail("global layers whose tensors differ from the windowed ones other than by attn_v");
  }
  if (has(TensorKind::AttnQNorm) != has(TensorKind::AttnKNorm)) fail("a Q norm without a K norm, or the reverse");
  if (qk_norm_whole && (!has(TensorKind::AttnQNorm) || q_gate || latent_attention()))
    fail("whole-projection Q/K norms without the norms, or with an output gate or latent attention");
}

ModelConfig ModelConfig::from_gguf(const gguf::File& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  auto key = [&](const char* suffix) { return c.arch + "." + suffix; };
  c.n_expert = static_cast<int>(f.get_int(key("expert_count"), 0));
  const Architecture& arch = find_architecture(c.arch, c.n_expert > 0, f.path());
  c.name = f.get_string("general.name", c.arch);

  c.n_layer = static_cast<int>(f.get_int(key("block_count")));
  // Multi-token-prediction layers (Qwen3.5, DeepSeek V3: nextn) follow the
  // model's own in the file; a plain forward pass does not run them, as
  // llama.cpp's does not, so they are not layers here (only the MTP draft,
  // --spec-type mtp, reads their tensors: engine/mtp_drafter.h).
  const int64_t nextn = f.get_int(key("nextn_predict_layers"), 0);
  if (nextn < 0 || nextn >= c.n_layer) fail("{}: bad nextn_predict_layers {} for {} blocks", f.path(), nextn, c.n_layer);
  c.n_layer -= static_cast<int>(nextn);
  c.n_nextn = static_cast<int>(nextn);
  // Required and optional keys as llama.cpp 0c1e570's loader reads them
  // (llama-model.cpp load_hparams, src/models/*.cpp): a file it loads loads
  // here. feed_forward_length is optional there (0: a model of experts
  // only, such as Qwen3.5 MoE, has no dense FFN); the RMS norm's epsilon
  // and the context length are required for every architecture Shoal runs.
  c.n_embd = static_cast<int>(f.get_int(key("embedding_length")));
  c.n_head = static_cast<int>(f.get_int(key("attention.head_count")));
  if (c.n_layer <= 0 || c.n_layer > 4096) fail("{}: bad block_count {}", f.path(), c.n_layer);
  const std::vector<bool> everywhere(c.n_layer, true);
  // One FFN width, or one per layer (gemma4 E2B: twice as wide where a layer reuses a cache; below).
  const std::vector<int> ff_widths = per_layer_ints(f, key("feed_forward_length"), c.n_layer, 0);
  c.n_ff = ff_widths[0];
  // One KV head count, or one per layer (gemma4: the windowed layers' and the global ones').
  const std::vector<int> kv_heads = per_layer_ints(f, key("attention.head_count_kv"), c.n_layer, c.n_head);
  c.n_ctx_train = static_cast<int>(f.get_int(key("context_length")));
  c.norm_eps = static_cast<float>(f.get_float(key("attention.layer_norm_rms_epsilon")));
  c.rope_style = arch.rope_style;
  c.activation = arch.activation;
  if (c.n_head <= 0) fail("{}: bad head_count {}", f.path(), c.n_head);
  c.head_dim = static_cast<int>(f.get_int(key("attention.key_length"), c.n_embd / c.n_head));
  if (!arch.latent_attention && f.get_int(key("attention.value_length"), c.head_dim) != c.head_dim)
    fail("{}: key and value heads of different sizes are not supported", f.path());
  c.rope_dim = static_cast<int>(f.get_int(key("rope.dimension_count"), c.head_dim));

  // Attention scale: the file's, else 1/sqrt(head size). Gemma 3 27B scales
  // by 1/sqrt(n_embd / n_head) instead (query_pre_attn_scalar), which
  // llama.cpp recognises by its 62 layers; so does Shoal.
  c.attn_scale = arch.attention_scale > 0.0f ? arch.attention_scale
                                            : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  if (c.arch == "gemma3" && c.n_layer == 62)
    c.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.n_embd / c.n_head)));
  c.attn_scale = static_cast<float>(f.get_float(key("attention.scale"), c.attn_scale));
  if (arch.scale_embeddings) c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.logit_softcap = static_cast<float>(f.get_float(key("final_logit_softcapping"), 0.0));

  // Rope: linear and YaRN scaling apply to the global layers; rope_freqs
  // (llama 3) carries its own factors; other schemes would give wrong answers.
  const std::string scaling = f.get_string(key("rope.scaling.type"), "linear");
  if (scaling != "linear" && scaling != "none" && scaling != "yarn")
    fail("{}: rope scaling '{}' is not supported (supported: linear, yarn, or llama 3 rope_freqs)", f.path(), scaling);
  float freq_scale = 1.0f;
  const double factor = f.get_float(key("rope.scaling.factor"), f.get_float(key("rope.scale_linear"), 0.0));
  if (scaling != "none" && factor != 0.0) freq_scale = static_cast<float>(1.0 / factor);
  c.yarn = read_yarn(f, c, scaling, freq_scale);
  const float freq_base = static_cast<float>(f.get_float(key("rope.freq_base"), 10000.0));

  const int window = static_cast<int>(f.get_int(key("attention.sliding_window"), 0));
  std::vector<bool> windowed(c.n_layer, false);
  if (window > 0 && arch.sliding_window_period > 0)
    windowed = windowed_layers(f, key("attention.sliding_window_pattern"), c.n_layer, arch.sliding_window_period);
  const float swa_base =
      static_cast<float>(f.get_float(key("rope.freq_base_swa"), arch.window_rope_like_global ? freq_base : 10000.0));
  const float swa_scale = arch.window_rope_like_global ? freq_scale : 1.0f;
  for (int l = 0; l < c.n_layer; ++l)
    c.layers.push_back(windowed[l] ? LayerSettings{window, swa_base, swa_scale} : LayerSettings{0, freq_base, freq_scale});
  std::vector<bool> global(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) global[l] = !c.windowed(l);
  c.n_head_kv = one_value(f, key("attention.head_count_kv"), kv_heads, global, true, kv_heads[0]);
  if (arch.window_geometry) read_window_geometry(f, c, kv_heads, windowed);
  else one_value(f, key("attention.head_count_kv"), kv_heads, everywhere, true, c.n_head);
  std::vector<bool> reusing(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) reusing[l] = c.kv_source(l) >= 0;
  c.n_ff = one_value(f, key("feed_forward_length"), ff_widths, reusing, false, ff_widths[0]);
  if (const int wide = one_value(f, key("feed_forward_length"), ff_widths, reusing, true, c.n_ff); wide != c.n_ff)
    c.n_ff_shared = wide;
  c.v_norm = arch.value_norm;

  if (c.n_expert > 0) {
    c.n_expert_used = static_cast<int>(f.get_int(key("expert_used_count")));
    const int64_t width = one_value(f, key("expert_feed_forward_length"),
                                    per_layer_ints(f, key("expert_feed_forward_length"), c.n_layer, 0), everywhere,
                                    true, 0);
    c.n_ff_exp = static_cast<int>(width != 0                ? width
                                  : arch.expert_width_split ? (c.n_expert_used > 0 ? c.n_ff / c.n_expert_used : 0)
                                                            : c.n_ff);
    if (!arch.shared_expert_tensors.empty()) {
      const int64_t shared = f.get_int(key("expert_shared_feed_forward_length"), 0);
      c.n_ff_shexp = static_cast<int>(shared != 0 ? shared : c.n_ff);
    }
    // Groups of experts (DeepSeek V3): llama.cpp reads these for every architecture.
    c.n_expert_groups = static_cast<int>(f.get_int(key("expert_group_count"), 0));
    c.n_group_used = static_cast<int>(f.get_int(key("expert_group_used_count"), 0));
  }

  const gguf::TensorInfo& embd = f.tensor(shoal::tensor_name(TensorKind::TokenEmbd));
  c.n_vocab = static_cast<int>(embd.n_rows());
  c.tied_output = f.find_tensor(shoal::tensor_name(TensorKind::Output)) == nullptr;
  c.rope_freq_factors = f.find_tensor(shoal::tensor_name(TensorKind::RopeFreqs)) != nullptr;
  c.q_gate = arch.attention_output_gate;
  c.qk_norm_whole = arch.qk_norm_whole;
  if (!arch.lead_tensors.empty()) c.n_dense_lead = static_cast<int>(f.get_int(key("leading_dense_block_count"), 0));
  if (c.arch == "glm4moe" && f.find(key("rope.dimension_sections")))
    fail("{}: rope.dimension_sections (GLM-4.5V's multimodal rope) is not supported", f.path());
  if (!arch.ffn_norm_name.empty()) c.ffn_norm_name = arch.ffn_norm_name;
  if (!arch.recurrent_tensors.empty()) {
    read_delta_net(f, c);
    c.delta.keys_interleaved = arch.delta_keys_interleaved;
    for (int l = 0; l < c.n_layer; ++l)
      if (c.recurrent(l) && f.find_tensor("blk." + std::to_string(l) + ".ssm_in.weight"))
        fail("{}: a DeltaNet layer with the joint ssm_in projection of early qwen3next conversions: convert the model "
             "again with a current convert_hf_to_gguf.py (it writes attn_qkv and attn_gate)", f.path());
  }
  if (arch.latent_attention) read_latent_attention(f, c);
  if (arch.routing_from_file && c.n_expert > 0) read_routing(f, arch, c);
  // Optional tensors: what the first layer of a kind has, every layer of
  // that kind must have (the binder checks).
  auto first_of = [&](LayerKind kind) {
    for (int l = c.n_dense_lead; l < c.n_layer; ++l)
      if (c.layers[l].kind == kind) return l;
    return 0;
  };
  // Where windowed and global layers may differ (gemma4), the first
  // windowed layer says what the windowed ones have, the first global one the others.
  auto first_where = [&](bool windowed_layer) {
    for (int l = c.n_dense_lead; l < c.n_layer; ++l)
      if (!c.recurrent(l) && c.windowed(l) == windowed_layer) return l;
    return -1;
  };
  const int first_attention = first_of(LayerKind::Attention);
  const int first_windowed = arch.window_geometry ? first_where(true) : -1;
  const int first_global = arch.window_geometry ? first_where(false) : -1;
  for (const LayerTensor& t : arch.layer_tensors)
    if (!t.optional || f.find_tensor(c.tensor_name(t.kind, first_windowed >= 0 ? first_windowed : first_attention)))
      c.layer_tensors.push_back(t.kind);
  if (first_windowed >= 0 && first_global >= 0) {
    std::vector<TensorKind> global_list;
    for (const LayerTensor& t : arch.layer_tensors)
      if (!t.optional || f.find_tensor(c.tensor_name(t.kind, first_global))) global_list.push_back(t.kind);
    if (global_list != c.layer_tensors) c.global_tensors = std::move(global_list);
  }
  // A layer that reads an earlier layer's cache computes no K or V of its own.
  if (c.n_kv_shared > 0)
    for (TensorKind k : c.layer_tensors)
      if (k != TensorKind::AttnK && k != TensorKind::AttnV && k != TensorKind::AttnKNorm) c.reuse_tensors.push_back(k);
  if (c.has(TensorKind::FfnGateInpScale)) c.router_input_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd));
  if (c.n_dense_lead > 0)
    for (const LayerTensor& t : arch.lead_tensors)
      if (!t.optional || f.find_tensor(c.tensor_name(t.kind, 0))) c.lead_tensors.push_back(t.kind);
  for (const LayerTensor& t : arch.recurrent_tensors)
    if (!t.optional || f.find_tensor(c.tensor_name(t.kind, first_of(LayerKind::DeltaNet))))
      c.recurrent_tensors.push_back(t.kind);
  // The shared expert's tensors follow either kind's (where the file has one).
  for (auto* list : {&c.layer_tensors, &c.recurrent_tensors})
    if (!list->empty() && c.n_ff_shexp > 0)
      for (const LayerTensor& t : arch.shared_expert_tensors) list->push_back(t.kind);
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", f.path(), e.what());
  }
  return c;
}

}  // namespace shoal
