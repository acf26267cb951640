#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace shoal {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_chunks() {
  // Chunks are claimed in turn, not dealt out: on a shared host (or a CPU
  // with fast and slow cores) one thread runs slower than another, and a
  // static half would keep the fast one waiting. Which thread computes a
  // chunk never changes its bits: every element depends only on its inputs.
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= job_chunks_) return;
    const int64_t begin = c * job_chunk_;
    (*job_)(begin, std::min(job_n_, begin + job_chunk_));
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                              int chunks_per_thread) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  // About chunks_per_thread chunks a thread, each a whole number of grains.
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per_chunk =
      std::max<int64_t>(1, units / (static_cast<int64_t>(n_threads_) * std::max(1, chunks_per_thread)));
  job_chunk_ = per_chunk * grain;
  job_chunks_ = (n + job_chunk_ - 1) / job_chunk_;
  next_chunk_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes the job
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mutex_);  // a sleeper checks generation_ under this lock
    wake_.notify_all();
  }
  run_chunks();
  // Spin, but yield once it takes long: on an oversubscribed machine the
  // thread we wait for may need this very core.
  for (int i = 0; pending_.load(std::memory_order_acquire) > 0; ++i) {
    if (i < 1024)
      cpu_relax();
    else
      std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little: the next op of a forward pass is usually microseconds away.
    auto spin_end = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen && !stop_; ++i) {
      if (i < 1024)
        cpu_relax();
      else
        std::this_thread::yield();  // let a busy machine's other threads run
      if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_end) break;
    }
    if (generation_.load(std::memory_order_acquire) == seen && !stop_) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
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
