#pragma once
// What a device lends, as the planner sees it: reported by a worker in its
// HELLO, or measured locally for the primary's own CPU.
#include <cstdint>
#include <string>
#include <vector>

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
  std::string probe = "Q4_0 x 4096";  // what both were measured on (ProbeShape::name)
  double step_overhead_ms = 0.0;  // fixed cost of a step whatever its size (launches, syncs); 0 for a CPU
  // What a recurrent (Gated DeltaNet) layer adds to a decode step beyond
  // the bytes it reads: its many small ops' dispatches (a described device
  // that measured it; 0: nothing beyond the bytes).
  double recurrent_layer_ms = 0.0;
  double rtt_ms = 0.0;         // round trip from the primary (0 for local)
  double link_gbps = 0.0;      // GB/s of the link from the primary; 0 = unknown (planner assumes 1)
};

// One weight matrix a decode step multiplies by.
struct ProbeMatrix {
  DType type = DType::Q4_0;
  int64_t rows = 0, cols = 0;
  bool operator==(const ProbeMatrix&) const = default;
};

// What a CPU is timed on: the model's own weights, once it is known, since
// kernels differ per type and short rows cost more per byte.
struct ProbeShape {
  // The batched rate: a matmul on the type most of the layers' bytes are
  // in, with the row length most of those bytes have.
  DType type = DType::Q4_0;
  int64_t cols = 4096;
  // The decode rate: the matrices of the model's first layers, in order
  // (empty: rows of type x cols). Each is one matmul of one token, its
  // activation quantized first, as a layer runs them.
  std::vector<ProbeMatrix> matrices;
  // What was timed, for people and to skip timing it twice.
  std::string name() const;
  bool operator==(const ProbeShape&) const = default;
};
inline constexpr int64_t kMaxProbeCols = 1 << 16;
// A decode pass reads this much: larger than any L3 we expect to meet, so
// it streams from memory as a stage of many layers does.
inline constexpr size_t kProbePassBytes = size_t{64} << 20;
inline constexpr int64_t kMaxProbeRows = 1 << 20;
inline constexpr size_t kMaxProbeMatrices = 512;

// Refuses (with fail) a shape the probe cannot time: a type without
// weight blocks, a row length not in whole blocks or above kMaxProbeCols,
// rows above kMaxProbeRows, more than kMaxProbeMatrices matrices.
void check_probe_shape(const ProbeShape& shape);

// Measures this machine's CPU in well under a second: one-token matmuls
// over weights larger than the caches (the decode rate) and a 64-token
// matmul (the prefill rate), both through the CPU backend's own matmul on
// `threads` threads (<= 0: ThreadPool::default_threads()). Free memory
// comes from /proc/meminfo (MemAvailable), read before the probe allocates.
DeviceInfo probe_local_cpu(int threads, const ProbeShape& shape = {});
// The same on a pool that already exists (a worker's or the engine's), so
// that the probe measures the threads that will run the layers.
DeviceInfo probe_local_cpu(ThreadPool& pool, const ProbeShape& shape = {});

}  // namespace shoal
