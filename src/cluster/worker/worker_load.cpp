// LOAD_STAGE on the worker: find each tensor in memory, the weight cache or
// the worker's own GGUF files (by content hash); ask the primary for the
// rest; check every hash before use; build the stage.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <sys/mman.h>

#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include <fmt/ranges.h>

#include "backend/tensor_split_backend.h"
#include "cluster/wire/model_config_json.h"
#include "cluster/worker/worker_session.h"
#include "model/kv_cache.h"
#include "model/recurrent_state.h"
#include "util/log.h"

namespace shoal {

using wire::ErrorCode;
using wire::MessageType;
using wire::ProtocolError;


namespace {

// Inside a catch: the stage's failure as the primary sees it. A device or
// host with no room is OUT_OF_MEMORY (the primary plans around it); other
// failures of a backend (a device that cannot run the shaders) are internal.
[[noreturn]] void refuse_stage(int begin, int end) {
  const std::string layers = fmt::format("layers {}-{}", begin, end - 1);
  try {
    throw;
  } catch (const OutOfMemory& e) {
    throw ProtocolError(ErrorCode::OutOfMemory, layers + ": " + e.what());
  } catch (const std::bad_alloc&) {
    throw ProtocolError(ErrorCode::OutOfMemory, layers + ": out of host memory");
  } catch (const Error& e) {
    throw ProtocolError(ErrorCode::Internal, layers + ": " + e.what());
  }
}

struct WantedTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;
  ContentHash hash;
  size_t bytes = 0;
  TensorBytes data;
  std::vector<uint8_t> received;  // owned buffer for a tensor the primary sends
  size_t received_bytes = 0;
  bool needed = false;
  // A tensor group member's rows of a divided tensor, when the primary
  // sends only those: the tensor's address space is reserved whole (pages
  // never touched cost nothing) and the share lands at its place in it.
  std::optional<RowShare> share;
  size_t share_offset = 0, share_bytes = 0;
  ContentHash share_name;      // the share's name among what stages hold: its tensor's hash and rows
  bool holds_share = false;    // data is only the share (received, or another stage's)
  std::shared_ptr<uint8_t> region;
  size_t held_bytes() const { return share ? share_bytes : bytes; }
  uint8_t* destination() { return share ? region.get() + share_offset : received.data(); }
  size_t expected_bytes() const { return share ? share_bytes : bytes; }
};

// Address space for a whole tensor, committed only where it is written.
std::shared_ptr<uint8_t> reserve_tensor(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw OutOfMemory(fmt::format("cannot reserve {} MiB of address space", bytes >> 20));
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [bytes](uint8_t* q) { ::munmap(q, bytes); });
}

WantedTensor parse_tensor(const nlohmann::json& t) {
  WantedTensor w;
  w.name = t.at("name").get<std::string>();
  const DTypeInfo* info = find_dtype(t.at("type").get<uint32_t>());
  if (!info || info->type == DType::Q8_K || info->type == DType::Q8_1)
    throw ProtocolError(ErrorCode::Malformed, fmt::format("tensor '{}' has an unsupported type", w.name));
  w.type = info->type;
  w.shape = t.at("shape").get<std::vector<int64_t>>();
  if (w.shape.empty() || w.shape.size() > 4) throw ProtocolError(ErrorCode::Malformed, "bad tensor shape");
  int64_t n = 1;
  for (int64_t d : w.shape) {
    if (d <= 0 || d > (1ll << 32) || n > (1ll << 40) / d) throw ProtocolError(ErrorCode::Malformed, "bad tensor shape");
    n *= d;
  }
  if (w.shape[0] % info->block_size != 0)
    throw ProtocolError(ErrorCode::Malformed, fmt::format("tensor '{}' rows are not whole blocks", w.name));
  w.bytes = static_cast<size_t>(n / info->block_size) * info->block_bytes;
  w.hash = ContentHash::from_hex(t.at("hash").get<std::string>());
  return w;
}

}  // namespace

void WorkerSession::load_stage(const wire::Frame& request) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t request_id = request.header.request_id;
  nlohmann::json body = wire::parse_json(request);
  auto stage = std::make_shared<WorkerStage>();
  stage->config = wire::config_from_json(body.at("config"));
  const ModelConfig& c = stage->config;
  const int begin = body.at("layer_begin").get<int>(), end = body.at("layer_end").get<int>();
  const int n_seq = body.at("n_seq").get<int>(), n_ctx = body.at("n_ctx").get<int>();
  const int max_tokens = body.at("max_tokens").get<int>();
  // Rows of a step a hybrid model's state keeps to take a guess back (speculative decoding).
  const int rewind_rows = body.value("rewind_rows", 0);
  KvTypes kv_types;
  try {
    kv_types = KvTypes{parse_kv_type(body.at("kv_type_k").get<std::string>()),
                       parse_kv_type(body.at("kv_type_v").get<std::string>())};
    check_kv_types(kv_types, c);
  } catch (const Error& e) {
    throw ProtocolError(ErrorCode::BadRequest, fmt::format("LOAD_STAGE: {}", e.what()));
  }
  if (begin < 0 || end > c.n_layer || begin >= end || n_seq < 1 || n_seq > 256 || n_ctx < 1 || n_ctx > (1 << 20) ||
      max_tokens < 1 || max_tokens > 4096 || rewind_rows < 0 || rewind_rows > 65)
    throw ProtocolError(ErrorCode::BadRequest, "LOAD_STAGE has an impossible layer range or size");

  // The cluster's workers, as the primary addresses them: a chain hop must be one of them.
  if (body.contains("members")) {
    const auto& members = body["members"];
    if (!members.is_array() || members.size() > 1024)
      throw ProtocolError(ErrorCode::BadRequest, "LOAD_STAGE members must be a list of addresses");
    std::set<std::string> named;
    for (const auto& m : members) {
      if (!m.is_string() || m.get<std::string>().size() > 256)
        throw ProtocolError(ErrorCode::BadRequest, "LOAD_STAGE members must be a list of addresses");
      named.insert(m.get<std::string>());
    }
    std::lock_guard<std::mutex> lock(s_.mutex_);
    s_.chain_members_ = std::move(named);
  }

  // A tensor group member: its rank, and the group's members in rank order
  // (each one this worker's primary named: a group cannot make it connect
  // to an arbitrary address).
  std::optional<TensorGroup> group;
  if (body.contains("group")) {
    const auto& g = body["group"];
    group.emplace();
    try {
      group->id = std::stoull(g.at("id").get<std::string>(), nullptr, 16);
      group->rank = g.at("rank").get<int>();
      group->members = g.at("members").get<std::vector<std::string>>();
      group->weights = g.contains("weights") ? g["weights"].get<ShareWeights>() : even_shares(group->size());
    } catch (const std::exception& e) {
      throw ProtocolError(ErrorCode::BadRequest,
                          fmt::format("LOAD_STAGE group is not {{id, rank, members, weights}}: {}", e.what()));
    }
    if (group->size() < 2 || group->size() > 64 || group->rank < 0 || group->rank >= group->size())
      throw ProtocolError(ErrorCode::BadRequest, fmt::format("LOAD_STAGE group: rank {} of {} members", group->rank,
                                                             group->size()));
    if (group->weights.size() != group->members.size() ||
        std::any_of(group->weights.begin(), group->weights.end(), [](int w) { return w < 1 || w > kMaxShareWeight; }))
      throw ProtocolError(ErrorCode::BadRequest,
                          fmt::format("LOAD_STAGE group weights must be one per member, each 1 to {}", kMaxShareWeight));
    std::lock_guard<std::mutex> lock(s_.mutex_);
    for (int r = 0; r < group->size(); ++r)
      if (r != group->rank && !s_.chain_members_.contains(group->members[r]))
        throw ProtocolError(ErrorCode::BadRequest, fmt::format("LOAD_STAGE group member {} is not one of the cluster's "
                                                               "workers", group->members[r]));
  }

  // The output head too, when asked (a tensor group that ends the model runs it): its norm and matrix.
  const bool head = body.value("head", false);
  if (head && end != c.n_layer)
    throw ProtocolError(ErrorCode::BadRequest, fmt::format("LOAD_STAGE asks for the output head with layers {}-{} "
                                                           "of {}: only a stage that ends the model runs it",
                                                           begin, end - 1, c.n_layer));
  // The tensors must be exactly those the layer range (and head) needs.
  const BindRange range{begin, end, head, false};
  const std::vector<std::string> expected = tensor_names_for(c, range);
  const auto& listed = body.at("tensors");
  if (!listed.is_array() || listed.size() != expected.size())
    throw ProtocolError(ErrorCode::BadRequest, fmt::format("LOAD_STAGE lists {} tensors, layers {}-{} need {}",
                                                           listed.size(), begin, end - 1, expected.size()));
  std::vector<WantedTensor> tensors;
  for (size_t i = 0; i < listed.size(); ++i) {
    tensors.push_back(parse_tensor(listed[i]));
    if (tensors.back().name != expected[i])
      throw ProtocolError(ErrorCode::BadRequest, fmt::format("LOAD_STAGE tensor {} is '{}', expected '{}'", i,
                                                             tensors.back().name, expected[i]));
  }
  // A tensor group member holds only its rows of the tensors the group divides.
  if (group) {
    const std::vector<std::optional<RowShare>> shares = tensor_shares(c, range, group->rank, group->weights);
    for (size_t i = 0; i < tensors.size(); ++i) {
      WantedTensor& w = tensors[i];
      if (!shares[i]) continue;
      const int64_t rows = std::accumulate(w.shape.begin() + 1, w.shape.end(), int64_t{1}, std::multiplies<>());
      // The shape is checked against the config only when the weights are
      // bound: a share must lie inside the tensor as the primary sizes it.
      if (shares[i]->end > rows)
        throw ProtocolError(ErrorCode::BadRequest, fmt::format("LOAD_STAGE tensor '{}' has {} rows; the config gives "
                                                               "it at least {}", w.name, rows, shares[i]->end));
      const size_t row_bytes = w.bytes / static_cast<size_t>(rows);
      w.share = shares[i];
      const std::string name = fmt::format("{} rows {}-{}", w.hash.hex(), w.share->begin, w.share->end);
      w.share_name = hash_bytes(reinterpret_cast<const uint8_t*>(name.data()), name.size());
      w.share_offset = static_cast<size_t>(w.share->begin) * row_bytes;
      w.share_bytes = static_cast<size_t>(w.share->rows()) * row_bytes;
    }
  }
  for (const WantedTensor& w : tensors) stage->weight_bytes += w.held_bytes();

  // Tensors another stage here holds already (the same primary re-planning
  // after a loss) are shared, not fetched again: their hash is their name.
  uint64_t shared_bytes = 0;
  int from_memory = 0;
  {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    // A share too, by its name (a group formed again after a failure).
    for (WantedTensor& w : tensors)
      for (const auto& [id, held] : s_.stages_) {
        auto it = std::find(held->hashes.begin(), held->hashes.end(), w.hash);
        if (it == held->hashes.end() && w.share)
          it = std::find(held->hashes.begin(), held->hashes.end(), w.share_name);
        if (it == held->hashes.end()) continue;
        const TensorBytes& b = held->tensors[static_cast<size_t>(it - held->hashes.begin())];
        if (b.size != w.bytes) continue;
        w.data = b;
        w.holds_share = *it == w.share_name && w.share;
        shared_bytes += w.held_bytes();  // what weight_bytes counted for it, held already
        ++from_memory;
        break;
      }
  }

  // Memory: what --mem lends, less what other stages hold.
  // (a tensor group member that divides attention by heads caches its heads only)
  stage->kv_bytes = KvCache::bytes_for(c, begin, end, n_seq, n_ctx, max_tokens, kv_types,
                                       group ? kv_heads_held(c, group->rank, group->weights) : 0) +
                    RecurrentState::bytes_for(c, begin, end, n_seq, rewind_rows);
  // The head's buffers hold a step's logits a few times over (the result, the device's, the group's
  // gathered ones): counted for a row per sequence, what decoding asks.
  const uint64_t head_scratch = head ? 4ull * n_seq * c.n_vocab * sizeof(float) : 0;
  // A member dividing attention by heads copies them through a buffer of its own.
  const AttentionHeads heads = attention_heads(c);
  const uint64_t heads_scratch = group && head_split(heads, static_cast<int>(group->weights.size()))
                                     ? head_scratch_bytes(heads, head_share(heads, group->rank, group->weights),
                                                          max_tokens)
                                     : 0;
  const uint64_t scratch = LayerScratch::bytes_for(c, max_tokens) +
                           CpuBackend::scratch_bytes(max_tokens, c.max_activation_width()) + head_scratch +
                           heads_scratch;
  const uint64_t need = stage->weight_bytes - shared_bytes + stage->kv_bytes + scratch;
  const uint64_t used = s_.memory_in_use(), lent = s_.device_.free_memory;
  if (need + used > lent)
    throw ProtocolError(ErrorCode::OutOfMemory,
                        fmt::format("layers {}-{} need {} MiB (weights {} + KV {} + buffers {}); this worker lends {} "
                                    "MiB and {} MiB are in use",
                                    begin, end - 1, need >> 20, stage->weight_bytes >> 20, stage->kv_bytes >> 20,
                                    scratch >> 20, lent >> 20, used >> 20));

  // Find what is here already; every found tensor is re-hashed before use.
  int from_cache = 0, from_models = 0, missing = 0;
  nlohmann::json missing_list = nlohmann::json::array();
  nlohmann::json share_rows = nlohmann::json::object();  // index -> [begin, end): only these rows are sent
  for (size_t i = 0; i < tensors.size(); ++i) {
    WantedTensor& w = tensors[i];
    if (w.data.data) continue;  // shared with a stage in memory
    if (s_.cache_) {
      TensorBytes b = s_.cache_->find(w.hash, w.bytes);
      if (b.data && hash_bytes(b.data, b.size) == w.hash) {
        w.data = std::move(b);
        ++from_cache;
        continue;
      }
      if (b.data) s_.cache_->remove(w.hash);  // corrupt on disk: fetch it again
    }
    if (s_.local_models_) {
      TensorBytes b = s_.local_models_->find(w.type, w.shape, w.hash);
      if (b.data && b.size == w.bytes) {
        w.data = std::move(b);
        ++from_models;
        continue;
      }
    }
    w.needed = true;
    if (w.share) {
      w.region = reserve_tensor(w.bytes);
      share_rows[std::to_string(i)] = {w.share->begin, w.share->end};
    } else {
      w.received.resize(w.bytes);
    }
    missing_list.push_back(i);
    ++missing;
  }
  conn_->send_json(MessageType::LoadNeeds, request_id,
                   {{"missing", missing_list},
                    {"rows", share_rows},
                    {"from_cache", from_cache},
                    {"from_models_dir", from_models},
                    {"from_memory", from_memory}});

  // Chunks until LOAD_COMMIT.
  wire::Frame frame;
  uint64_t received_total = 0;
  for (;;) {
    conn_->receive(frame, s_.options_.timeout_ms);
    if (frame.type() == MessageType::LoadCommit) break;
    if (frame.type() != MessageType::TensorData)
      throw ProtocolError(ErrorCode::Malformed, fmt::format("{} during a load", wire::message_name(frame.type())));
    if (frame.payload.size() < 16) throw ProtocolError(ErrorCode::Malformed, "TENSOR_DATA is truncated");
    uint32_t index;
    uint64_t offset;
    std::memcpy(&index, frame.payload.data(), 4);
    std::memcpy(&offset, frame.payload.data() + 8, 8);
    const size_t len = frame.payload.size() - 16;
    // A share's offsets count from its first row.
    if (index >= tensors.size() || !tensors[index].needed || offset > tensors[index].expected_bytes() ||
        len > tensors[index].expected_bytes() - offset)
      throw ProtocolError(ErrorCode::Malformed, "TENSOR_DATA outside the tensors this load asked for");
    std::memcpy(tensors[index].destination() + offset, frame.payload.data() + 16, len);
    tensors[index].received_bytes += len;
    received_total += len;
    s_.stats_.weight_bytes_received += len;
  }

  // Check every received tensor, keep it in the cache, bind the weights.
  // A share is checked against the hash the primary gave with LOAD_COMMIT,
  // not cached, and named by that hash (another stage wanting the whole
  // tensor must not take it).
  const nlohmann::json commit = wire::parse_json(frame);
  const nlohmann::json share_hashes = commit.value("shares", nlohmann::json::object());
  std::map<std::string, TensorRef> refs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    WantedTensor& w = tensors[i];
    if (w.needed && w.share) {
      const auto given = share_hashes.find(std::to_string(i));
      const ContentHash share_hash = hash_bytes(w.destination(), w.share_bytes);
      if (w.received_bytes != w.share_bytes || given == share_hashes.end() || !given->is_string() ||
          ContentHash::from_hex(given->get<std::string>()) != share_hash)
        throw ProtocolError(ErrorCode::HashMismatch,
                            fmt::format("rows {}-{} of tensor '{}' arrived incomplete or with the wrong content hash",
                                        w.share->begin, w.share->end - 1, w.name));
      w.data = TensorBytes{w.region.get(), w.bytes, w.region};
      w.holds_share = true;
      ++s_.stats_.tensors_received;
    } else if (w.needed) {
      if (w.received_bytes != w.bytes || hash_bytes(w.received.data(), w.bytes) != w.hash)
        throw ProtocolError(ErrorCode::HashMismatch,
                            fmt::format("tensor '{}' arrived incomplete or with the wrong content hash", w.name));
      if (s_.cache_) s_.cache_->put(w.hash, w.received.data(), w.bytes);
      auto owned = std::make_shared<std::vector<uint8_t>>(std::move(w.received));
      w.data = TensorBytes{owned->data(), owned->size(), owned};
      ++s_.stats_.tensors_received;
    }
    refs[w.name] = TensorRef{w.type, w.shape, w.data.data};
    stage->tensors.push_back(w.data);
    stage->hashes.push_back(w.holds_share ? w.share_name : w.hash);
  }
  s_.stats_.tensors_from_cache += from_cache;
  s_.stats_.tensors_from_models_dir += from_models;
  TensorLookup lookup = [&](const std::string& name) -> const TensorRef* {
    auto it = refs.find(name);
    return it == refs.end() ? nullptr : &it->second;
  };
  stage->weights = bind_weights(lookup, "LOAD_STAGE", c, range);
  stage->head = head;
  try {
    stage->backend = make_layer_backend(s_.device_choice_, *s_.pool_, max_tokens, c.max_activation_width());
    if (group) {
      // Each member prepares (and, on the CPU, copies) only its share of the rows.
      stage->exchange = std::make_shared<PeerExchange>(
          *group, PeerLinkOptions{s_.options_.key, s_.options_.timeout_ms, s_.options_.plain_frames});
      auto split = std::make_unique<TensorSplitBackend>(std::move(stage->backend), stage->exchange, group->rank,
                                                     group->weights);
      // The CPU's copy of the share in groups of eight rows only when it fits in what this worker lends
      // (a GPU's copy is the one it computes on).
      if (!s_.device_choice_.vulkan)
        split->set_copy_shares(s_.memory_in_use() + need + prepared_bytes(*split, stage->weights, c, range) <=
                               s_.device_.free_memory);
      stage->backend = std::move(split);
      std::lock_guard<std::mutex> compute(s_.compute_mutex_);
      stage->grouped_bytes = prepare_weights(*stage->backend, stage->weights, c, range);
    } else if (s_.device_choice_.vulkan) {
      prepare_weights(*stage->backend, stage->weights, c, range);  // the GPU's copy; the host's stays for sharing
    } else {
      // Rows in groups of eight (faster, the same bits) when the copy fits in
      // what this worker lends; the received tensors stay for sharing.
      const uint64_t copy = prepared_bytes(*stage->backend, stage->weights, c, range);
      if (copy > 0 && s_.memory_in_use() + need + copy <= s_.device_.free_memory) {
        std::lock_guard<std::mutex> compute(s_.compute_mutex_);  // the copy runs on the shared pool
        stage->grouped_bytes = prepare_weights(*stage->backend, stage->weights, c, range);
      }
    }
  } catch (const std::exception&) {
    refuse_stage(begin, end);
  }
  try {
    stage->stage = std::make_unique<LocalStage>(*stage->backend, stage->config, stage->weights, begin, end, n_seq,
                                                n_ctx, max_tokens, kv_types,
                                                group ? kv_heads_held(c, group->rank, group->weights) : 0,
                                                rewind_rows);
  } catch (const std::exception&) {
    refuse_stage(begin, end);
  }
  {
    std::lock_guard<std::mutex> lock(s_.mutex_);
    stage->id = s_.next_stage_id_++;
    s_.stages_[stage->id] = stage;
  }
  owned_.push_back(stage->id);
  ++s_.stats_.stages_loaded;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("stage {}: layers {}-{} of {} ({} MiB; {} tensors received, {} from cache, {} from models dir, {} "
               "shared with stages in memory)",
               stage->id, begin, end - 1, c.name, stage->weight_bytes >> 20, missing, from_cache, from_models,
               from_memory);
  if (group)
    spdlog::info("stage {}: member {} of tensor group {:016x} ({} members, share weights {})", stage->id, group->rank,
                 group->id, group->size(), fmt::join(group->weights, ":"));
  conn_->send_json(MessageType::StageReady, request_id,
                   {{"stage_id", stage->id},
                    {"weight_bytes", stage->weight_bytes},
                    {"kv_bytes", stage->kv_bytes},
                    {"received_bytes", received_total},
                    {"tensors_received", missing},
                    {"from_cache", from_cache},
                    {"from_models_dir", from_models},
                    {"from_memory", from_memory},
                    {"free_after", s_.device_.free_memory - std::min(s_.device_.free_memory, s_.memory_in_use())},
                    {"seconds", seconds}});
}

}  // namespace shoal
