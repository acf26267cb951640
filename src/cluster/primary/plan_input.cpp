#include "cluster/primary/plan_input.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string_view>

#include "gguf/reader.h"
#include "model/config.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/tensor_split_shares.h"
#include "cluster/device_info.h"
#include "model/kv_cache.h"
#include "model/recurrent_state.h"
#include "model/transformer_layer.h"
#include "model/tensor_names.h"
#include "model/weights.h"
#include "tensor/random_weights.h"

namespace shoal {
namespace {

// The layer a tensor belongs to ("blk.12.attn_q.weight" -> 12), or -1.
int layer_of(std::string_view name) {
  constexpr std::string_view prefix = "blk.";
  if (!name.starts_with(prefix)) return -1;
  name.remove_prefix(prefix.size());
  int layer = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') return -1;
  return layer;
}

uint64_t tensor_bytes(const gguf::File& file, TensorKind kind) {
  const gguf::TensorInfo* t = file.find_tensor(tensor_name(kind));
  return t ? t->bytes : 0;
}

}  // namespace

ProbeShape probe_shape_for(const gguf::File& file, const ModelConfig& config) {
  std::map<std::pair<DType, int64_t>, uint64_t> bytes;  // (type, row length) -> bytes
  std::map<DType, uint64_t> by_type;
  ProbeShape shape;
  uint64_t listed = 0;
  int last_layer = -1;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const int layer = layer_of(t.name);
    if (layer < 0 || t.shape.size() < 2 || !is_weight_type(static_cast<uint32_t>(t.type)) ||
        t.row_length() > kMaxProbeCols)
      continue;
    bytes[{t.type, t.row_length()}] += t.bytes;
    by_type[t.type] += t.bytes;
    // Whole layers, until they fill the probe's pass.
    if (layer != last_layer && listed >= kProbePassBytes) continue;
    const int64_t rows = t.n_rows();
    const bool experts = t.shape.size() >= 3 && config.n_expert > 0;
    const int64_t read = experts ? rows / config.n_expert * std::max(1, config.n_expert_used) : rows;
    if (read <= 0 || read > kMaxProbeRows || shape.matrices.size() == kMaxProbeMatrices) continue;
    shape.matrices.push_back({t.type, read, t.row_length()});
    listed += static_cast<uint64_t>(read) * row_bytes(t.type, t.row_length());
    last_layer = layer;
  }
  uint64_t most = 0;
  for (const auto& [type, n] : by_type)
    if (n > most) shape.type = type, most = n;
  most = 0;
  for (const auto& [key, n] : bytes)
    if (key.first == shape.type && n > most) shape.cols = key.second, most = n;
  return shape;
}

uint64_t primary_scratch_bytes(const ModelConfig& c, int n_seq, int n_batch) {
  const uint64_t f = sizeof(float), batch = std::max(1, n_batch);
  const uint64_t backend = CpuBackend::scratch_bytes(static_cast<int>(batch), c.max_activation_width());
  uint64_t pipeline = 2 * batch * c.activation_width() * f;  // hidden + gathered rows
  // With per-layer inputs (gemma4 E2B/E4B): the head's two buffers of them and the travelling rows.
  if (c.side_width() > 0) pipeline += batch * (2ull * c.side_width() + c.activation_width()) * f;
  const uint64_t logits = static_cast<uint64_t>(std::max(1, n_seq)) * c.n_vocab * f;  // one row per decoding sequence
  const uint64_t layer = LayerScratch::bytes_for(c, static_cast<int>(batch));
  return backend + pipeline + logits + layer;
}

MtpDraftCost mtp_draft_cost(const gguf::File& file, const ModelConfig& config, int n_ctx, int n_seq, int n_batch,
                            KvTypes kv_types) {
  MtpDraftCost cost;
  if (config.n_nextn < 1) return cost;
  if (n_ctx <= 0) n_ctx = std::min(config.n_ctx_train, 4096);
  const double routed = config.n_expert > 0 ? static_cast<double>(config.n_expert_used) / config.n_expert : 1.0;
  bool own_head = false;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (layer_of(t.name) != config.n_layer) continue;  // the first nextn block
    cost.held_bytes += t.bytes;
    if (t.name.find(".nextn.embed_tokens.") != std::string::npos) continue;  // a row a token
    own_head = own_head || t.name.find(".nextn.shared_head_head.") != std::string::npos;
    cost.read_bytes += static_cast<double>(t.bytes) * (t.name.find("_exps.") != std::string::npos ? routed : 1.0);
  }
  if (!own_head)
    cost.read_bytes += static_cast<double>(tensor_bytes(file, config.tied_output ? TensorKind::TokenEmbd : TensorKind::Output));
  int attention = -1;  // the block caches as the model's last attention layer does
  for (int l = 0; l < config.n_layer; ++l)
    if (!config.recurrent(l)) attention = l;
  const int batch = std::max(1, n_batch), seqs = std::max(1, n_seq);
  if (attention >= 0)
    cost.held_bytes += KvCache::bytes_for(config, attention, attention + 1, seqs, n_ctx, batch, kv_types);
  cost.held_bytes += LayerScratch::bytes_for(config, batch) + 5ull * batch * config.n_embd * sizeof(float) +
                     static_cast<uint64_t>(seqs) * config.n_vocab * sizeof(float);
  return cost;
}

PlanInput plan_input_for_model(const gguf::File& file, const ModelConfig& config, int n_ctx, int n_seq, int n_batch,
                               KvTypes kv_types, int rewind_rows, bool mtp_draft) {
  PlanInput in;
  // Every tensor of the layer, not only those the binder knows: what the
  // file holds for a layer is what a stage would have to take.
  in.layer_bytes.assign(config.n_layer, 0);
  in.layer_read_bytes.assign(config.n_layer, 0);
  in.layer_flops.assign(config.n_layer, 0.0);
  in.layer_split_bytes.assign(config.n_layer, 0);
  in.layer_exchange_values.assign(config.n_layer, 0);
  const AttentionHeads heads = attention_heads(config);
  in.attention_heads = heads;
  in.layer_q_bytes.assign(config.n_layer, 0);
  in.layer_kv_proj_bytes.assign(config.n_layer, 0);
  if (heads.any())
    in.head_exchange_extra = static_cast<uint64_t>(config.q_proj_width() + 2 * config.kv_width() - config.attn_out_width());
  // A decode step reads only the routed experts' rows of an expert tensor.
  const double routed = config.n_expert > 0 ? static_cast<double>(config.n_expert_used) / config.n_expert : 1.0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const int layer = layer_of(t.name);
    // Layers past n_layer (none in the supported architectures) belong to
    // no stage; ignore rather than refuse a file the engine can run.
    if (layer < 0 || layer >= config.n_layer) continue;
    const double share = t.name.find("_exps.") != std::string::npos ? routed : 1.0;
    in.layer_bytes[layer] += t.bytes;
    in.layer_read_bytes[layer] += static_cast<uint64_t>(t.bytes * share);
    in.layer_flops[layer] += 2.0 * t.n_elements() * share;
    // What a tensor group divides (backend/tensor_split_backend.h): a matrix
    // that is not a stack, whose rows it all-gathers; and a mixture's
    // experts, whose routed rows it trades once (at the down projection).
    // Attention's Q, K and V are divided by heads, and what is all-gathered
    // is attention's output, not their rows.
    const bool q = t.name.find(".attn_q.") != std::string::npos;
    const bool kv = t.name.find(".attn_k.") != std::string::npos || t.name.find(".attn_v.") != std::string::npos;
    if (t.shape.size() == 2 && (q || kv) && heads.any()) {
      in.layer_split_bytes[layer] += t.bytes;
      (q ? in.layer_q_bytes : in.layer_kv_proj_bytes)[layer] += t.bytes;
      if (q) in.layer_exchange_values[layer] += static_cast<uint64_t>(config.attn_out_width());
    } else if (t.shape.size() == 2 && share == 1.0 && t.n_rows() >= 2 * kRowShareUnit) {
      in.layer_split_bytes[layer] += t.bytes;
      in.layer_exchange_values[layer] += static_cast<uint64_t>(t.n_rows());
    } else if (t.shape.size() == 3 && share < 1.0) {
      in.layer_split_bytes[layer] += static_cast<uint64_t>(t.bytes * share);
      if (t.name.find("ffn_down_exps.") != std::string::npos)
        in.layer_exchange_values[layer] += static_cast<uint64_t>(config.n_expert_used) * config.n_embd;
    }
  }

  // Same default as Engine: the trained context, capped at 4096.
  if (n_ctx <= 0) n_ctx = std::min(config.n_ctx_train, 4096);
  // A layer's sequence memory: its KV cache, or a DeltaNet's recurrent state.
  for (int l = 0; l < config.n_layer; ++l)
    in.layer_kv_bytes.push_back(KvCache::bytes_for(config, l, l + 1, std::max(1, n_seq), n_ctx, std::max(1, n_batch),
                                                   kv_types) +
                                RecurrentState::bytes_for(config, l, l + 1, std::max(1, n_seq), rewind_rows));
  // A DeltaNet reads and writes its sequence's state once a token, beside its weights.
  for (int l = 0; l < config.n_layer; ++l) {
    in.layer_read_bytes[l] += 2 * RecurrentState::bytes_for(config, l, l + 1, 1);
    in.layer_recurrent.push_back(config.recurrent(l));
  }
  // Per position and per sequence: a layer's attention work and cache entry
  // (none where it reads an earlier layer's cache), a DeltaNet's state.
  for (int l = 0; l < config.n_layer; ++l) {
    const bool attends = !config.recurrent(l);
    const AttentionGeometry g = config.attention_of(l);
    const int v = config.latent_attention() ? config.mla.kv_lora_rank : g.head_dim;
    in.layer_pair_flops.push_back(attends ? 2.0 * config.n_head * (g.head_dim + v) : 0.0);
    in.layer_window.push_back(config.layers[l].window);
    in.layer_kv_row_bytes.push_back(attends ? KvCache::bytes_for(config, l, l + 1, 1, 1, 1, kv_types) : 0);
    in.layer_state_bytes.push_back(RecurrentState::bytes_for(config, l, l + 1, 1));
  }

  const uint64_t embd = tensor_bytes(file, TensorKind::TokenEmbd);
  const uint64_t norm = tensor_bytes(file, TensorKind::OutputNorm);
  const uint64_t output = config.tied_output ? 0 : tensor_bytes(file, TensorKind::Output);
  // rope_freqs is tiny and every stage needs it; count it on the primary only.
  const uint64_t rope = tensor_bytes(file, TensorKind::RopeFreqs);
  in.primary_bytes = embd + norm + output + rope + primary_scratch_bytes(config, n_seq, n_batch);
  if (mtp_draft) in.primary_bytes += mtp_draft_cost(file, config, n_ctx, n_seq, n_batch, kv_types).held_bytes;
  // Per token the head streams output.weight (the embedding when tied) and
  // the norm; the embedding itself is only read one row per token.
  in.head_bytes = (config.tied_output ? embd : output) + norm;
  in.head_flops = 2.0 * config.n_vocab * config.n_embd;
  in.logit_bytes = static_cast<uint64_t>(config.n_vocab) * sizeof(float);
  in.activation_bytes = static_cast<uint64_t>(config.activation_width()) * sizeof(float);  // a row as it travels
  for (int l = config.n_layer - config.n_kv_shared; l < config.n_layer; ++l)  // from the first cache read later
    if (const int source = config.kv_source(l); source >= 0)
      in.kept_together_from = in.kept_together_from < 0 ? source : std::min(in.kept_together_from, source);
  return in;
}

}  // namespace shoal
