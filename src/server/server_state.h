#pragma once
// What the server is doing — loading, ready or degraded — and how far the
// loading has got. The loader thread (and, for a failed request, the engine
// side) changes it; HTTP threads read it for /health, /v1/cluster and to
// refuse API calls while loading. One mutex; readers get a copy.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace shoal::server {

enum class Phase { Loading, Ready, Degraded };

inline const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::Loading: return "loading";
    case Phase::Ready: return "ready";
    case Phase::Degraded: return "degraded";
  }
  return "unknown";
}

// Weights streaming to one worker (ClusterOptions::on_progress).
struct LoadProgress {
  std::string device;  // host:port, or "local" while the primary maps its file
  uint64_t sent_bytes = 0;
  uint64_t total_bytes = 0;
  double mib_per_s = 0.0;
};

struct ServerStatus {
  Phase phase = Phase::Loading;
  std::string reason;                   // why degraded; empty otherwise
  std::optional<LoadProgress> progress; // while loading, once anything is known
};

class ServerState {
 public:
  ServerStatus status() const {
    std::lock_guard lock(mutex_);
    return status_;
  }
  bool loading() const {
    std::lock_guard lock(mutex_);
    return status_.phase == Phase::Loading;
  }

  // The rate is measured from the first report for a device, so a cache hit
  // (nothing to send) shows as 0 MiB/s rather than a division by zero.
  void set_progress(const std::string& device, uint64_t sent, uint64_t total) {
    std::lock_guard lock(mutex_);
    if (status_.phase != Phase::Loading) return;
    const auto now = std::chrono::steady_clock::now();
    if (!status_.progress || status_.progress->device != device) {
      status_.progress = LoadProgress{device, 0, total, 0.0};
      progress_start_ = now;
      start_bytes_ = sent;
    }
    LoadProgress& p = *status_.progress;
    p.sent_bytes = sent;
    p.total_bytes = total;
    const double seconds = std::chrono::duration<double>(now - progress_start_).count();
    if (seconds > 0.05) p.mib_per_s = static_cast<double>(sent - start_bytes_) / seconds / (1024.0 * 1024.0);
  }

  void set_ready() {
    std::lock_guard lock(mutex_);
    status_.phase = Phase::Ready;
    status_.reason.clear();
    status_.progress.reset();
  }

  // The cluster cannot hold the model now (or can again: set_ready). Unlike
  // set_degraded, the newest reason is the one that holds.
  void set_unavailable(const std::string& reason) {
    std::lock_guard lock(mutex_);
    status_.phase = Phase::Degraded;
    status_.reason = reason;
    status_.progress.reset();
  }

  // The first reason stays: later failures are usually its consequences.
  void set_degraded(const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (status_.phase == Phase::Degraded) return;
    status_.phase = Phase::Degraded;
    status_.reason = reason;
    status_.progress.reset();
  }

 private:
  mutable std::mutex mutex_;
  ServerStatus status_;
  std::chrono::steady_clock::time_point progress_start_;
  uint64_t start_bytes_ = 0;
};

}  // namespace shoal::server
