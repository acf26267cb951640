#pragma once
// What the server counts and how it reports it: Prometheus text for /metrics
// and the JSON of /v1/cluster (devices, layers, memory, RTT, throughput) that
// the dashboard draws. The Scheduler keeps the generation counters; this adds
// HTTP status counts, reused prompt tokens, and the recent generation rate
// (a sampler thread reads the Scheduler's token count twice a second).
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "server/server_state.h"

namespace shoal::server {

// Everything /metrics and /v1/cluster show, gathered by the route. engine
// and stats are null while the model loads.
struct ClusterView {
  ServerStatus status;
  std::string model_id;                  // the served model id (the GGUF file name)
  std::string model_path;
  std::vector<std::string> workers;      // --rpc, shown while loading
  Engine* engine = nullptr;
  const SchedulerStats* stats = nullptr;
};

class Metrics {
 public:
  Metrics() = default;
  ~Metrics() { stop_rate_sampling(); }
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Samples scheduler.stats().tokens_out every 0.5 s until stopped (before
  // the Scheduler goes away).
  void start_rate_sampling(const Scheduler& scheduler);
  void stop_rate_sampling();
  // Tokens generated per second over the last ~5 s.
  double generation_tokens_per_second() const;

  void count_http(int status);
  // Engine thread, once per request, from its on_done.
  void count_finished(const RequestResult& result);

  std::string prometheus(const ClusterView& view) const;
  nlohmann::json cluster(const ClusterView& view) const;

 private:
  struct Sample {
    std::chrono::steady_clock::time_point time;
    uint64_t tokens_out = 0;
  };
  static constexpr size_t kSamples = 11;  // 5 s at 0.5 s apart, plus now

  mutable std::mutex mutex_;
  std::array<Sample, kSamples> samples_{};
  size_t n_samples_ = 0;  // filled so far (then a ring)
  size_t next_ = 0;
  std::condition_variable stop_wake_;
  bool stopping_ = false;
  std::thread sampler_;

  // HTTP responses by status class and the few statuses worth telling apart.
  std::atomic<uint64_t> http_2xx_{0}, http_4xx_{0}, http_5xx_{0}, http_401_{0}, http_413_{0}, http_503_{0};
  std::atomic<uint64_t> tokens_reused_{0}, cancelled_{0}, errors_{0};
};

}  // namespace shoal::server
