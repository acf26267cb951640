// The local CPU probe: how fast this machine streams quantized weights
// (decode is bound by that) and how fast it multiplies a batch (prefill).
// It runs the engine's own kernels (vec_dot on blocks of the given type
// against its activation type, rows split over the pool as
// CpuBackend::matmul does), so the numbers describe what the layers will
// actually get.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "cluster/device_info.h"

#include "backend/device_choice.h"
#include "util/system_memory.h"
#include "tensor/gemm.h"
#include "tensor/interleave.h"
#include "tensor/random_weights.h"
#include "tensor/vec_dot.h"
#include "util/error.h"
#include "util/log.h"
#include "util/thread_pool.h"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMatvecBytes = size_t{64} << 20;    // larger than any L3 we expect to meet
constexpr size_t kMatmulBytes = size_t{4} << 20;     // compute bound: rows stay in cache
constexpr int kMatmulTokens = 64;                    // a prefill micro-batch
constexpr double kBudgetSeconds = 0.4;               // stop repeating once past this

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// splitmix64: cheap, and good enough to make the weights look like weights.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

DeviceInfo probe_local_cpu(int threads, DType type, int64_t cols) {
  ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
  return probe_local_cpu(pool, type, cols);
}

DeviceInfo probe_local_cpu(ThreadPool& pool, DType type, int64_t cols) {
  if (cols <= 0 || cols > kMaxProbeCols || cols % dtype_info(type).block_size != 0)
    fail("probe: rows of {} values do not fit {} blocks (or exceed {})", cols, dtype_info(type).name, kMaxProbeCols);
  const Clock::time_point start = Clock::now();
  DeviceInfo info;
  info.address = "local";
  info.backend = "CPU";
  info.kind = "cpu";
  info.simd = cpu_simd_target();
  info.threads = pool.size();
  // Before allocating, so the probe's own buffer is not counted as used.
  const SystemMemory mem = read_system_memory();
  info.total_memory = mem.total;
  info.free_memory = mem.available;
  if (mem.total == 0) spdlog::warn("probe: cannot read /proc/meminfo; reporting no free memory");

  const DType wtype = type;
  info.probe_type = dtype_info(type).name;
  info.probe_cols = cols;
  const DType atype = activation_dtype(wtype);
  const size_t wrow = row_bytes(wtype, cols), arow = row_bytes(atype, cols);
  constexpr int64_t kTile = 64;  // rows of random blocks, repeated over the buffer
  // Whole tiles, at least one (long rows of a wide type).
  const int64_t mv_rows = std::max<int64_t>(kTile, static_cast<int64_t>(kMatvecBytes / wrow) / kTile * kTile);
  const int64_t mm_rows = std::max<int64_t>(kTile, static_cast<int64_t>(kMatmulBytes / wrow) / kTile * kTile);

  // One allocation, carved into sections (64-byte aligned), freed on return.
  auto up64 = [](size_t n) { return (n + 63) & ~size_t{63}; };
  const size_t w_size = up64(mv_rows * wrow), af_size = up64(kMatmulTokens * cols * sizeof(float)),
               aq_size = up64(kMatmulTokens * arow), ymv_size = up64(mv_rows * sizeof(float)),
               ymm_size = up64(kMatmulTokens * mm_rows * sizeof(float));
  std::unique_ptr<uint8_t[]> arena(new uint8_t[w_size + af_size + aq_size + ymv_size + ymm_size + 64]);
  uint8_t* base = arena.get() + (64 - reinterpret_cast<uintptr_t>(arena.get()) % 64) % 64;
  uint8_t* weights = base;
  auto* act_f32 = reinterpret_cast<float*>(weights + w_size);
  uint8_t* act_q = reinterpret_cast<uint8_t*>(act_f32) + af_size;
  auto* y_mv = reinterpret_cast<float*>(act_q + aq_size);
  auto* y_mm = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(y_mv) + ymv_size);

  // 64 rows of sane random blocks, in the layout the CPU backend gives
  // the model's weights (groups of eight rows where the type has one),
  // tiled over the buffer from the pool's threads, so that on a NUMA
  // machine each page lands near the thread that reads it in the matvec
  // (same static row split).
  std::mt19937 rng(0x5EED);
  std::vector<uint8_t> tile = random_weights(wtype, kTile * cols, rng);
  const bool grouped = interleavable(wtype) && gemm_reads_groups();
  if (grouped) {
    std::vector<uint8_t> x8(tile.size());
    interleave_rows(wtype, tile.data(), kTile, cols, x8.data());
    tile.swap(x8);
  }
  pool.parallel_for(mv_rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::memcpy(weights + r * wrow, tile.data() + (r % kTile) * wrow, wrow);
  });
  uint64_t state = 42;
  for (int64_t i = 0; i < kMatmulTokens * cols; ++i)
    act_f32[i] = static_cast<float>(static_cast<int64_t>(next_random(state) % 2001) - 1000) / 1000.0f;
  for (int t = 0; t < kMatmulTokens; ++t) quantize_activation(wtype, act_f32 + t * cols, act_q + t * arow, cols);

  auto matvec = [&] {
    pool.parallel_for(mv_rows, 16, [&](int64_t r0, int64_t r1) {
      gemm_rows(Matrix{wtype, weights, mv_rows, cols, grouped}, r0, r1, act_q, arow, 1, y_mv, mv_rows);
    });
  };
  // As CpuBackend::matmul: rows split over threads, tokens in tiles.
  auto matmul = [&] {
    pool.parallel_for(mm_rows, 16, [&](int64_t r0, int64_t r1) {
      gemm_rows(Matrix{wtype, weights, mm_rows, cols, grouped}, r0, r1, act_q, arow, kMatmulTokens, y_mm, mm_rows);
    });
  };
  // The best of a few runs: the question is what the machine can do, and
  // the slower runs measure interference from other processes.
  auto best_of = [&](auto&& fn, int max_runs) {
    double best = 1e30;
    for (int i = 0; i < max_runs; ++i) {
      const Clock::time_point t0 = Clock::now();
      fn();
      best = std::min(best, seconds_since(t0));
      if (seconds_since(start) > kBudgetSeconds) break;
    }
    return best;
  };

  matvec();  // warm-up: first-call dispatch, TLB
  const double mv_s = best_of(matvec, 3);
  const double mm_s = best_of(matmul, 2);
  info.matvec_gbps = static_cast<double>(mv_rows * wrow) / mv_s / 1e9;
  info.matmul_gflops = 2.0 * kMatmulTokens * mm_rows * cols / mm_s / 1e9;

  // Keep the results observable so no compiler drops the work.
  volatile float sink = y_mv[mv_rows - 1] + y_mm[kMatmulTokens * mm_rows - 1];
  (void)sink;
  spdlog::debug("probe ({}): {} threads, matvec {:.1f} GB/s ({:.2f} ms), matmul {:.1f} GFLOP/s ({:.2f} ms), {:.0f} ms total",
                info.probe_type, info.threads, info.matvec_gbps, mv_s * 1e3, info.matmul_gflops, mm_s * 1e3,
                seconds_since(start) * 1e3);
  return info;
}

}  // namespace shoal
