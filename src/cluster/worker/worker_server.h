#pragma once
// `shoal worker`: lends this machine's CPU and memory to one primary at a
// time. Each connection has its own thread, within caps (handshakes and
// sessions counted apart, so idle strangers cannot crowd out a primary); a
// second primary is told the worker is busy; chain peers (other workers) may
// forward to its stages. A peer silent past the timeout is gone: its session
// ends and frees what it held. Any failure of a connection ends that
// connection only.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/wire/connection.h"
#include "backend/device_choice.h"
#include "cluster/device_info.h"
#include "cluster/worker/local_models.h"
#include "cluster/worker/weight_cache.h"
#include "cluster/worker/worker_stage.h"
#include "util/thread_pool.h"

namespace shoal {

struct WorkerOptions {
  std::string host = "127.0.0.1";
  int port = 50052;               // 0: any free port (printed)
  uint64_t mem_limit = 0;         // bytes lent; 0: what is free
  std::optional<std::string> key;
  std::string cache_dir;          // empty: no weight cache
  uint64_t cache_max = 0;
  std::string models_dir;         // empty: none
  int threads = 0;
  std::string device = "cpu";     // --device: cpu, vulkan, vulkan:N
  uint64_t max_payload = wire::kDefaultMaxPayload;
  int timeout_ms = wire::kDefaultPeerTimeoutMs;  // --worker-timeout
  bool plain_frames = false;      // --insecure: no encryption even with a key (trusted network)
  int max_handshakes = 64;        // connections not yet authenticated
  int max_sessions = 64;          // authenticated connections (primary + chain peers)
};

struct WorkerStats {
  std::atomic<uint64_t> weight_bytes_received{0};
  std::atomic<uint64_t> tensors_received{0};
  std::atomic<uint64_t> tensors_from_cache{0};
  std::atomic<uint64_t> tensors_from_models_dir{0};
  std::atomic<uint64_t> stages_loaded{0};
  std::atomic<uint64_t> forwards{0};
  std::atomic<uint64_t> forward_rows{0};  // rows the FORWARDs carried in
  std::atomic<uint64_t> result_rows{0};   // rows FORWARD_RESULTs carried back
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> timed_out{0};  // sessions ended by silence
};

class WorkerServer {
 public:
  explicit WorkerServer(WorkerOptions options);
  ~WorkerServer();

  int port() const { return port_; }
  // Accepts connections until stop(); each runs on its own thread.
  void run();
  void stop();
  // Closes every connection and waits up to `wait` for their threads to
  // end; true when none is left. The destructor does it without a limit, so
  // no session thread outlives the server.
  bool close_sessions(std::chrono::milliseconds wait);

 private:
  friend class WorkerSession;
  // Starts a session thread; false (connection refused) over the caps or
  // when no thread can be made.
  bool start_session(std::shared_ptr<wire::Connection> conn);
  // Every link we must keep alive gets a HEARTBEAT when it has been quiet a
  // while: our primary's (also while a long FORWARD computes) and our
  // chain hops'.
  void heartbeat_loop();
  void keep_alive(const std::shared_ptr<wire::Connection>& conn);
  nlohmann::json hello_info();
  nlohmann::json stats_json();
  uint64_t memory_in_use();

  WorkerOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> handshakes_{0}, sessions_{0};
  // Session threads running, and their connections (to wake them on stop).
  std::mutex threads_mutex_;
  std::condition_variable threads_done_;
  int live_threads_ = 0;
  std::vector<std::weak_ptr<wire::Connection>> session_conns_;
  // Connections still in their handshake, oldest first: when every
  // handshake slot is taken, the oldest of the host holding the most slots
  // is closed to make room, so strangers holding slots cannot lock the
  // primary out (its handshake takes a round trip or two; theirs never
  // ends), and one busy host cannot push out anyone else's.
  std::deque<std::weak_ptr<wire::Connection>> pending_;
  // mutex threads_mutex_ held: closes one pending handshake as above.
  void evict_one_pending();
  // A session's handshake is over: it no longer counts as pending.
  void authenticated(const wire::Connection* conn);
  std::thread heartbeat_thread_;
  std::unique_ptr<ThreadPool> pool_;
  DeviceInfo device_;
  DeviceChoice device_choice_;  // where stages run (after falling back to the CPU if need be)
  std::unique_ptr<WeightCache> cache_;
  std::unique_ptr<LocalModels> local_models_;
  WorkerStats stats_;

  std::mutex mutex_;  // guards everything below
  std::map<uint32_t, std::shared_ptr<WorkerStage>> stages_;
  uint32_t next_stage_id_ = 1;
  bool primary_active_ = false;
  std::condition_variable primary_left_;  // primary_active_ went false
  std::string primary_peer_;
  std::shared_ptr<wire::Connection> primary_conn_;  // where chain results go
  std::map<std::string, std::shared_ptr<wire::Connection>> next_hops_;  // chain peers we forward to
  std::set<std::string> chain_members_;  // the workers our primary named (LOAD_STAGE): the only FORWARD hops
  std::vector<std::weak_ptr<wire::Connection>> kept_alive_;
  std::mutex compute_mutex_;  // one stage computes at a time: they share the thread pool
};

}  // namespace shoal
