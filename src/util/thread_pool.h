#pragma once
// One persistent pool of worker threads, created once; the token loop only
// hands it ranges. Work is split by output rows so that the result of each
// element never depends on the thread count (docs/design.md, determinism).
//
// Waking a sleeping thread costs tens of microseconds on a VM — more than a
// small model's whole matmul — so between jobs the workers spin for a short
// while (kSpinMicros) before they sleep on a condition variable, as
// llama.cpp's pool polls. An idle pool sleeps: it never burns a core while
// the process waits for a request or the network.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shoal {

class ThreadPool {
 public:
  static constexpr int kChunksPerThread = 4;

  // n_threads counts the calling thread: 1 means no extra threads.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n), chunks a
  // multiple of `grain` long, about `chunks_per_thread` a thread, and
  // returns when all are done. Not reentrant: one caller at a time.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                    int chunks_per_thread = kChunksPerThread);

  // Physical cores of this machine (falls back to hardware_concurrency).
  static int default_threads();

 private:
  static constexpr int kSpinMicros = 2000;
  void worker_loop();
  void run_chunks();

  int n_threads_;
  std::vector<std::thread> threads_;
  // The job in flight, published by the release increment of generation_.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_chunk_ = 1;   // elements per chunk, a multiple of the grain
  int64_t job_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace shoal
