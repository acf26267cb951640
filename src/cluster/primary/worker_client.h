#pragma once
// The primary's side of one worker connection: handshake, device report,
// stage loading with progress, KV operations, ping and stats.
#include <functional>
#include <map>
#include <memory>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>

#include "cluster/wire/connection.h"
#include "cluster/content_hash.h"
#include "cluster/device_info.h"
#include "engine/stage.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace shoal {
namespace gguf { class File; }

// Content hashes of a file's tensors, computed once each on first need.
class TensorHashes {
 public:
  explicit TensorHashes(const gguf::File& file) : file_(file) {}
  ContentHash get(const std::string& name);

 private:
  const gguf::File& file_;
  std::map<std::string, ContentHash> hashes_;
};

struct StageLoadReport {
  uint32_t stage_id = 0;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t sent_bytes = 0;
  int tensors_sent = 0;
  int from_cache = 0;
  int from_memory = 0;  // shared with a stage the worker already held
  int from_models_dir = 0;
  uint64_t free_after = 0;
  double seconds = 0.0;
};

// How the primary talks to its workers: the cluster key, the silence that
// counts as lost, and whether frames are plain (--insecure) or sealed.
struct LinkOptions {
  std::optional<std::string> key;
  int timeout_ms = wire::kDefaultPeerTimeoutMs;
  bool insecure = false;
};

class WorkerClient {
 public:
  // Connects and authenticates; throws shoal::Error / ProtocolError with the
  // reason (unreachable, busy, key, version). Every later wait on this
  // worker ends after timeout_ms of silence with a LinkError naming it.
  WorkerClient(const std::string& address, const LinkOptions& link);

  const std::string& address() const { return address_; }
  // A copy: probe() may update it from another thread meanwhile.
  DeviceInfo device() const {
    std::lock_guard<std::mutex> lock(device_mutex_);
    return device_;
  }
  // The device's matvec and matmul rates on the model's own weights (PROBE;
  // a worker without the capability keeps its Q4_0 figures, one from
  // before the matrices were sent times the dominant type alone). Measured
  // once per shape; device() reports the last one. A failed probe is
  // warned about and keeps the figures it had: the worker's loss, if that
  // is what it was, shows at the next request.
  void probe(const ProbeShape& shape);
  // The worker takes FORWARD's list of rows out (capability "rows-out").
  bool takes_rows_out() const { return takes_rows_out_; }
  wire::Connection& connection() { return *conn_; }
  uint64_t next_request_id() { return ++request_id_; }
  int timeout_ms() const { return timeout_ms_; }
  // Whoever talks to the worker (the engine thread, or the supervisor's
  // keeper reading heartbeats on an idle link) holds this meanwhile.
  std::mutex& io() { return io_; }
  // Ends the connection (a lost worker); a reader blocked on it wakes.
  void close() { conn_->shutdown(); }

  double ping_ms();
  // GB/s the link carries, measured with LINK_PROBE (done at connect: device().link_gbps).
  double measure_link_gbps();
  nlohmann::json stats();
  // Loads layers [begin, end): the worker says which tensors it lacks and
  // only those are streamed, in chunks; `progress(sent, total)` is called
  // as bytes go out. `members`: every worker of the plan, as the primary
  // addresses them; the only hops a chain FORWARD may name. group: a tensor
  // group member's {id, rank, members, weights}; head: the stage (which ends
  // the model) holds the output head too.
  StageLoadReport load_stage(const gguf::File& file, TensorHashes& hashes, const ModelConfig& config, int begin,
                             int end, int n_seq, int n_ctx, int max_tokens, int rewind_rows, KvTypes kv_types,
                             const std::vector<std::string>& members,
                             const std::function<void(uint64_t, uint64_t)>& progress,
                             const nlohmann::json& group = nullptr, bool head = false);
  void kv_op(const nlohmann::json& op);
  // A sequence's cache of one layer of a stage it holds, out and in
  // (CACHE_READ, CACHE_WRITE).
  LayerCache read_cache(uint32_t stage_id, int seq, int layer);
  void write_cache(uint32_t stage_id, int seq, int layer, const LayerCache& cache);
  void copy_cache(uint32_t from_stage, uint32_t to_stage, int seq, int layer);  // CACHE_COPY
  void unload(uint32_t stage_id);
  // GROUP_LINK: the stage's tensor group member links to every other member
  // (the others must be asked at the same time); returns the milliseconds
  // it took; a member it could not link with is a ProtocolError naming it.
  double link_group(uint32_t stage_id);

 private:
  nlohmann::json request(wire::MessageType type, const nlohmann::json& body, wire::MessageType reply);

  std::string address_;
  std::unique_ptr<wire::Connection> conn_;
  DeviceInfo device_;
  mutable std::mutex device_mutex_;  // device_ against probe()
  bool can_probe_ = false;           // the worker has the "probe" capability
  bool takes_rows_out_ = false;
  std::optional<ProbeShape> probed_;  // what its figures were last measured on
  std::atomic<uint64_t> request_id_{0};
  int timeout_ms_;
  std::mutex io_;
};

}  // namespace shoal
