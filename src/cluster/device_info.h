#pragma once
// What a device lends, as the planner sees it: reported by a worker in its
// HELLO, or measured locally for the primary's own CPU.
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace shoal {

class ThreadPool;

struct DeviceInfo {
  std::string address;       // "local" or host:port as given to --rpc
  std::string backend;       // what runs the layers, for people: "CPU", or a GPU's name
  std::string kind = "cpu";  // the backend type: "cpu" or "vulkan" (bits match only within one kind)
  std::string simd;          // the CPU's SIMD target ("AVX2", ...): CPU bits match within one target
  uint64_t total_memory = 0; // bytes
  uint64_t free_memory = 0;  // bytes it can lend (worker: min(free, --mem))
  int threads = 0;
  double matvec_gbps = 0.0;    // measured: GB/s of weights streamed by matvec (0 = unknown)
  double matmul_gflops = 0.0;  // measured: GFLOP/s of a batched matmul (0 = unknown)
  std::string probe_type = "Q4_0";  // the weight type both were measured on
  int64_t probe_cols = 4096;        // and the row length
  double step_overhead_ms = 0.0;  // fixed cost of a step whatever its size (launches, syncs); 0 for a CPU
  double rtt_ms = 0.0;         // round trip from the primary (0 for local)
  double link_gbps = 0.0;      // GB/s of the link from the primary; 0 = unknown (planner assumes 1)
};

// Measures this machine's CPU in well under a second: a matvec over a
// weight buffer larger than the caches and a small batched matmul, both on
// `threads` threads (<= 0: ThreadPool::default_threads()), on weights of
// `type` (the model's own, once it is known: kernels differ per type).
// Free memory comes from /proc/meminfo (MemAvailable), read before the
// probe allocates.
// Rows are `cols` values long (the model's, once known: short rows cost
// more per byte).
DeviceInfo probe_local_cpu(int threads, DType type = DType::Q4_0, int64_t cols = 4096);
// The same on a pool that already exists (a worker's or the engine's), so
// that the probe measures the threads that will run the layers.
DeviceInfo probe_local_cpu(ThreadPool& pool, DType type = DType::Q4_0, int64_t cols = 4096);
inline constexpr int64_t kMaxProbeCols = 1 << 16;

}  // namespace shoal
