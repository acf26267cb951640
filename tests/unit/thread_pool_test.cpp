// The thread pool's contract: parallel_for covers [0, n) exactly once in
// chunks that start on a grain boundary, whatever the thread count; and a
// slow thread does not hold up the others (chunks are claimed, not dealt).
#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace shoal {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceOnGrainBoundaries) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 8, 100, 1000, 12345})
      for (int64_t grain : {1, 8, 16, 1024}) {
        SCOPED_TRACE(testing::Message() << threads << " threads, n " << n << ", grain " << grain);
        std::vector<int> seen(static_cast<size_t>(n), 0);
        std::mutex mutex;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++seen[i];  // disjoint chunks: no two threads touch one index
          std::lock_guard<std::mutex> lock(mutex);
          chunks.emplace_back(b, e);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "index " << i;
        for (const auto& [b, e] : chunks) {
          EXPECT_EQ(b % grain, 0) << "a chunk starts inside a grain";
          EXPECT_TRUE(e == n || e % grain == 0) << "a chunk ends inside a grain";
        }
      }
  }
}

TEST(ThreadPool, ASlowThreadLeavesItsChunksToTheOthers) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::mutex mutex;
  int by_caller = 0, total = 0;
  // The worker sleeps 50 ms in each chunk it takes; meanwhile the caller
  // claims the rest. With fixed halves the caller would do exactly half.
  pool.parallel_for(8000, 1, [&](int64_t, int64_t) {
    const bool mine = std::this_thread::get_id() == caller;
    if (!mine) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lock(mutex);
    ++total;
    by_caller += mine;
  });
  EXPECT_GT(total, 2);
  EXPECT_GT(2 * by_caller, total) << by_caller << " of " << total << " chunks on the caller";
}

}  // namespace
}  // namespace shoal
