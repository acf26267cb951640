#pragma once
// The requests the HTTP side has handed to the Scheduler and not yet
// answered, so that shutdown can cancel them all at once: HTTP threads that
// wait for their request then finish, and the HTTP server can join them.
// After cancel_all() nothing more is submitted.
#include <mutex>
#include <optional>
#include <set>

#include "engine/scheduler.h"

namespace shoal::server {

class InFlight {
 public:
  // Submits unless shutdown has begun (then nullopt). The lock is held
  // across submit so that cancel_all() cannot miss a request being submitted.
  std::optional<uint64_t> submit(Scheduler& scheduler, Request request) {
    std::lock_guard lock(mutex_);
    if (stopping_) return std::nullopt;
    const uint64_t id = scheduler.submit(std::move(request));
    ids_.insert(id);
    return id;
  }
  void remove(uint64_t id) {
    std::lock_guard lock(mutex_);
    ids_.erase(id);
  }
  void cancel_all(Scheduler& scheduler) {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (uint64_t id : ids_) scheduler.cancel(id);
  }

 private:
  std::mutex mutex_;
  std::set<uint64_t> ids_;
  bool stopping_ = false;
};

}  // namespace shoal::server
