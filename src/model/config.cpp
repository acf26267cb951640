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

}  // namespace

int64_t ModelConfig::dim(Dim d) const {
  switch (d) {
    case Dim::One: return 1;
    case Dim::Embd: return n_embd;
    case Dim::Vocab: return n_vocab;
    case Dim::QWidth: return q_width();
    case Dim::KvWidth: return kv_width();
    case Dim::HeadDim: return head_dim;
    case Dim::Ff: return n_ff;
    case Dim::FfExpert: return n_ff_exp;
    case Dim::Experts: return n_expert;
    case Dim::RopeHalf: return rope_dim / 2;
  }
  return 0;
}

void ModelConfig::validate() const {
  if (n_layer <= 0 || n_layer > 4096) fail("bad block_count {}", n_layer);
  if (n_embd <= 0 || n_embd > 65536 || n_head <= 0 || n_head > 1024 || n_head_kv <= 0 || n_ff <= 0 ||
      n_ff > (1 << 20) || n_vocab <= 0)
    fail("bad dimensions (embedding {}, heads {}/{}, ffn {}, vocabulary {})", n_embd, n_head, n_head_kv, n_ff,
         n_vocab);
  if (n_head % n_head_kv != 0) fail("head_count {} is not a multiple of head_count_kv {}", n_head, n_head_kv);
  if (head_dim <= 0 || head_dim > 512 || head_dim % 2 != 0) fail("unsupported head size {}", head_dim);
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
  if (static_cast<int>(layers.size()) != n_layer) fail("{} layer settings for {} layers", layers.size(), n_layer);
  for (const LayerSettings& l : layers)
    if (l.window < 0 || l.window > (1 << 20) || !(l.rope_freq_base > 0.0f) || !std::isfinite(l.rope_freq_base) ||
        !(l.rope_freq_scale > 0.0f) || !std::isfinite(l.rope_freq_scale))
      fail("bad layer settings (window {}, rope base {}, scale {})", l.window, l.rope_freq_base, l.rope_freq_scale);
  for (size_t i = 0; i < layer_tensors.size(); ++i)
    if (static_cast<int>(layer_tensors[i]) < kFirstLayerKind ||
        std::find(layer_tensors.begin(), layer_tensors.begin() + i, layer_tensors[i]) != layer_tensors.begin() + i)
      fail("bad layer tensor list");
  for (TensorKind k : {TensorKind::AttnNorm, TensorKind::AttnQ, TensorKind::AttnK, TensorKind::AttnV,
                       TensorKind::AttnOutput, TensorKind::FfnNorm})
    if (!has(k)) fail("a layer without {}", tensor_spec(k).name);
  const bool dense = has(TensorKind::FfnGate) && has(TensorKind::FfnUp) && has(TensorKind::FfnDown);
  const bool experts = has(TensorKind::FfnGateExps) && has(TensorKind::FfnUpExps) && has(TensorKind::FfnDownExps);
  if (moe ? !experts : !dense) fail("a layer without a complete feed-forward block");
  if (has(TensorKind::AttnQNorm) != has(TensorKind::AttnKNorm)) fail("a Q norm without a K norm, or the reverse");
}

ModelConfig ModelConfig::from_gguf(const gguf::File& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  auto key = [&](const char* suffix) { return c.arch + "." + suffix; };
  c.n_expert = static_cast<int>(f.get_int(key("expert_count"), 0));
  const Architecture& arch = find_architecture(c.arch, c.n_expert > 0, f.path());
  c.name = f.get_string("general.name", c.arch);

  c.n_layer = static_cast<int>(f.get_int(key("block_count")));
  c.n_embd = static_cast<int>(f.get_int(key("embedding_length")));
  c.n_ff = static_cast<int>(f.get_int(key("feed_forward_length")));
  c.n_head = static_cast<int>(f.get_int(key("attention.head_count")));
  c.n_head_kv = static_cast<int>(f.get_int(key("attention.head_count_kv"), c.n_head));
  c.n_ctx_train = static_cast<int>(f.get_int(key("context_length"), 2048));
  c.norm_eps = static_cast<float>(f.get_float(key("attention.layer_norm_rms_epsilon"), 1e-5));
  c.rope_style = arch.rope_style;
  c.activation = arch.activation;
  if (c.n_layer <= 0 || c.n_layer > 4096) fail("{}: bad block_count {}", f.path(), c.n_layer);
  if (c.n_head <= 0) fail("{}: bad head_count {}", f.path(), c.n_head);
  c.head_dim = static_cast<int>(f.get_int(key("attention.key_length"), c.n_embd / c.n_head));
  if (f.get_int(key("attention.value_length"), c.head_dim) != c.head_dim)
    fail("{}: key and value heads of different sizes are not supported", f.path());
  c.rope_dim = static_cast<int>(f.get_int(key("rope.dimension_count"), c.head_dim));

  // Attention scale: the file's, else 1/sqrt(head size). Gemma 3 27B scales
  // by 1/sqrt(n_embd / n_head) instead (query_pre_attn_scalar), which
  // llama.cpp recognises by its 62 layers; so does Shoal.
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  if (c.arch == "gemma3" && c.n_layer == 62)
    c.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.n_embd / c.n_head)));
  c.attn_scale = static_cast<float>(f.get_float(key("attention.scale"), c.attn_scale));
  if (arch.scale_embeddings) c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.logit_softcap = static_cast<float>(f.get_float(key("final_logit_softcapping"), 0.0));

  // Rope: linear scaling applies to the global layers; rope_freqs (llama 3)
  // carries its own factors; other schemes would give wrong answers.
  const std::string scaling = f.get_string(key("rope.scaling.type"), "linear");
  if (scaling != "linear" && scaling != "none")
    fail("{}: rope scaling '{}' is not supported (supported: linear, or llama 3 rope_freqs)", f.path(), scaling);
  float freq_scale = 1.0f;
  const double factor = f.get_float(key("rope.scaling.factor"), f.get_float(key("rope.scale_linear"), 0.0));
  if (scaling == "linear" && factor != 0.0) freq_scale = static_cast<float>(1.0 / factor);
  const float freq_base = static_cast<float>(f.get_float(key("rope.freq_base"), 10000.0));

  const int window = static_cast<int>(f.get_int(key("attention.sliding_window"), 0));
  std::vector<bool> windowed(c.n_layer, false);
  if (window > 0 && arch.sliding_window_period > 0)
    windowed = windowed_layers(f, key("attention.sliding_window_pattern"), c.n_layer, arch.sliding_window_period);
  const float swa_base = static_cast<float>(f.get_float(key("rope.freq_base_swa"), 10000.0));
  for (int l = 0; l < c.n_layer; ++l)
    c.layers.push_back(windowed[l] ? LayerSettings{window, swa_base, 1.0f} : LayerSettings{0, freq_base, freq_scale});

  if (c.n_expert > 0) {
    c.n_expert_used = static_cast<int>(f.get_int(key("expert_used_count")));
    c.n_ff_exp = static_cast<int>(f.get_int(key("expert_feed_forward_length"), c.n_ff));
    // expert_weights_scale stays 1: llama.cpp reads that key only for
    // architectures Shoal does not run (DeepSeek and kin).
  }

  const gguf::TensorInfo& embd = f.tensor(tensor_name(TensorKind::TokenEmbd));
  c.n_vocab = static_cast<int>(embd.n_rows());
  c.tied_output = f.find_tensor(tensor_name(TensorKind::Output)) == nullptr;
  c.rope_freq_factors = f.find_tensor(tensor_name(TensorKind::RopeFreqs)) != nullptr;
  // Optional tensors: what layer 0 has, every layer must have (the binder checks).
  for (const LayerTensor& t : arch.layer_tensors)
    if (!t.optional || f.find_tensor(tensor_name(t.kind, 0))) c.layer_tensors.push_back(t.kind);
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", f.path(), e.what());
  }
  return c;
}

}  // namespace shoal
