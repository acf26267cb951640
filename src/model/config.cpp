#include "model/config.h"

#include <array>
#include <string_view>

#include "gguf/reader.h"
#include "model/tensor_names.h"
#include "util/error.h"

namespace shoal {
namespace {

// What differs per architecture, as data.
struct ArchTraits {
  std::string_view name;
  RopeStyle rope_style;
};

constexpr std::array kArchitectures = {
    ArchTraits{"llama", RopeStyle::Interleaved},
    ArchTraits{"qwen2", RopeStyle::Neox},
};

const ArchTraits& find_arch(const std::string& arch, const std::string& path) {
  for (const auto& a : kArchitectures)
    if (a.name == arch) return a;
  std::string known;
  for (const auto& a : kArchitectures) known += (known.empty() ? "" : ", ") + std::string(a.name);
  fail("{}: unsupported architecture '{}' (supported: {})", path, arch, known);
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::File& f) {
  ModelConfig c;
  c.arch = f.get_string("general.architecture");
  const ArchTraits& traits = find_arch(c.arch, f.path());
  c.name = f.get_string("general.name", c.arch);
  auto key = [&](const char* suffix) { return c.arch + "." + suffix; };

  c.n_layer = static_cast<int>(f.get_int(key("block_count")));
  c.n_embd = static_cast<int>(f.get_int(key("embedding_length")));
  c.n_ff = static_cast<int>(f.get_int(key("feed_forward_length")));
  c.n_head = static_cast<int>(f.get_int(key("attention.head_count")));
  c.n_head_kv = static_cast<int>(f.get_int(key("attention.head_count_kv"), c.n_head));
  c.n_ctx_train = static_cast<int>(f.get_int(key("context_length"), 2048));
  c.norm_eps = static_cast<float>(f.get_float(key("attention.layer_norm_rms_epsilon"), 1e-5));
  c.rope_freq_base = static_cast<float>(f.get_float(key("rope.freq_base"), 10000.0));
  if (f.has(key("rope.scaling.factor")) && f.get_string(key("rope.scaling.type"), "linear") == "linear")
    c.rope_freq_scale = static_cast<float>(1.0 / f.get_float(key("rope.scaling.factor")));
  c.rope_style = traits.rope_style;

  if (c.n_layer <= 0 || c.n_layer > 4096) fail("{}: bad block_count {}", f.path(), c.n_layer);
  if (c.n_embd <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.n_ff <= 0)
    fail("{}: bad dimensions (embedding {}, heads {}/{}, ffn {})", f.path(), c.n_embd, c.n_head, c.n_head_kv, c.n_ff);
  if (c.n_head % c.n_head_kv != 0)
    fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), c.n_head, c.n_head_kv);
  c.head_dim = static_cast<int>(f.get_int(key("attention.key_length"), c.n_embd / c.n_head));
  if (c.head_dim <= 0 || c.head_dim > 512 || c.head_dim % 2 != 0)
    fail("{}: unsupported head size {}", f.path(), c.head_dim);
  c.rope_dim = static_cast<int>(f.get_int(key("rope.dimension_count"), c.head_dim));
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    fail("{}: bad rope dimension {} for head size {}", f.path(), c.rope_dim, c.head_dim);

  const gguf::TensorInfo& embd = f.tensor(tensor_name(TensorKind::TokenEmbd));
  c.n_vocab = static_cast<int>(embd.n_rows());
  c.tied_output = f.find_tensor(tensor_name(TensorKind::Output)) == nullptr;
  c.qkv_bias = f.find_tensor(tensor_name(TensorKind::AttnQBias, 0)) != nullptr;
  c.rope_freq_factors = f.find_tensor(tensor_name(TensorKind::RopeFreqs)) != nullptr;
  return c;
}

}  // namespace shoal
