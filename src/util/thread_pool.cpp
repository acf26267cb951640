#include "util/thread_pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace shoal {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_share(int index) {
  // Static partition in grain units: thread i always gets the same rows.
  int64_t units = (job_n_ + job_grain_ - 1) / job_grain_;
  int64_t per = units / n_threads_, extra = units % n_threads_;
  int64_t first = index * per + std::min<int64_t>(index, extra);
  int64_t count = per + (index < extra ? 1 : 0);
  int64_t begin = first * job_grain_;
  int64_t end = std::min(job_n_, (first + count) * job_grain_);
  if (begin < end) (*job_)(begin, end);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  run_share(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_share(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

int ThreadPool::default_threads() {
  // Count distinct (physical id, core id) pairs: hyperthreads share a core's
  // memory bandwidth and FMA units, so llama.cpp-style defaults use cores.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys = "0";
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "physical id") phys = value;
    if (key == "core id") cores.insert({phys, value});
  }
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  int n = cores.empty() ? hw : static_cast<int>(cores.size());
  return std::max(1, std::min(n, hw > 0 ? hw : n));
}

}  // namespace shoal
