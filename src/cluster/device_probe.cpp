// The local CPU probe: how fast this machine streams quantized weights
// (decode is bound by that) and how fast it multiplies a batch (prefill).
// It runs CpuBackend::matmul itself on weights in the layout the backend
// gives the model's, so the numbers describe what the layers will get.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>

#include "cluster/device_info.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/device_choice.h"
#include "util/system_memory.h"
#include "tensor/gemm.h"
#include "tensor/interleave.h"
#include "tensor/random_weights.h"
#include "util/error.h"
#include "util/log.h"
#include "util/thread_pool.h"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMatmulBytes = size_t{4} << 20;     // compute bound: rows stay in cache
constexpr int kMatmulTokens = 64;                    // a prefill micro-batch
constexpr int64_t kTile = 64;                        // rows of random blocks, repeated over a matrix
constexpr size_t kMaxPassMatrices = 4096;            // matmuls in one decode pass
constexpr double kMatvecSeconds = 0.4;               // decode passes repeated for this long
constexpr double kMatmulSeconds = 0.1;               // and prefill matmuls
// A stage's step comes after an idle wait while the other stages compute,
// and a CPU that has idled for some milliseconds streams memory 5-10 %
// slower than one that never stopped (a KVM guest here, 80 MB passes: 12.4
// GB/s back to back, 11.3-11.9 after 10-30 ms asleep), so decode passes
// are timed after such a wait, as a stage's steps are. A machine decoding
// alone, never idle, runs that much faster than predicted.
constexpr auto kIdleBeforePass = std::chrono::milliseconds(10);

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// splitmix64: cheap, and good enough to make the weights look like weights.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

size_t matrix_bytes(const ProbeMatrix& m) { return static_cast<size_t>(m.rows) * row_bytes(m.type, m.cols); }

// The decode pass: the shape's matrices (or rows of its type enough to
// outgrow the caches), scaled down to kProbePassBytes when larger, repeated
// up to it when smaller, so that every pass streams from memory as a stage
// of many layers does.
std::vector<ProbeMatrix> decode_pass(const ProbeShape& shape) {
  std::vector<ProbeMatrix> layer = shape.matrices;
  if (layer.empty()) {
    const size_t wrow = row_bytes(shape.type, shape.cols);
    layer.push_back({shape.type, std::max<int64_t>(kTile, static_cast<int64_t>(kProbePassBytes / wrow) / kTile * kTile),
                     shape.cols});
  }
  size_t total = 0;
  for (const ProbeMatrix& m : layer) total += matrix_bytes(m);
  if (total > kProbePassBytes) {
    // Fewer rows of each, whole groups of eight: a huge layer keeps its mix of types.
    const double scale = static_cast<double>(kProbePassBytes) / total;
    total = 0;
    for (ProbeMatrix& m : layer) {
      m.rows = std::max<int64_t>(8, static_cast<int64_t>(m.rows * scale) / 8 * 8);
      total += matrix_bytes(m);
    }
    // Eight rows each may still be too many (hundreds of very long rows): the first ones only.
    while (layer.size() > 1 && total > 2 * kProbePassBytes) {
      total -= matrix_bytes(layer.back());
      layer.pop_back();
    }
  }
  std::vector<ProbeMatrix> pass;
  // Copies of a small layer, but not millions of tiny matrices (a PROBE may
  // ask for anything within its limits).
  const size_t copies = total >= kProbePassBytes / 2 ? 1
                                                  : std::min((kProbePassBytes + total - 1) / total,
                                                             std::max<size_t>(1, kMaxPassMatrices / layer.size()));
  for (size_t copy = 0; copy < copies; ++copy)
    pass.insert(pass.end(), layer.begin(), layer.end());
  return pass;
}

// Random blocks for one type and row length in one layout: up to kTile
// rows, no more than the matrix they fill has (a tile is never larger than
// its matrix).
struct Tile {
  std::vector<uint8_t> bytes;
  int64_t rows = 0;
};

// Weights for one matrix: its tile's rows of sane random blocks, in the
// layout the CPU backend gives the model's (groups of eight rows where its
// matmul reads them), repeated over the rows from the pool's threads, so
// that on a NUMA machine each page lands near the thread that reads it
// (the matmul's static row split).
class ProbeWeights {
 public:
  ProbeWeights(ThreadPool& pool, const ProbeMatrix& m, const Tile& tile) : bytes_(matrix_bytes(m) + 64) {
    const size_t wrow = row_bytes(m.type, m.cols);
    uint8_t* w = data();
    pool.parallel_for(m.rows, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::memcpy(w + r * wrow, tile.bytes.data() + (r % tile.rows) * wrow, wrow);
    });
    matrix_ = Matrix{m.type, w, m.rows, m.cols, grouped(m)};
  }
  static bool grouped(const ProbeMatrix& m) {
    return interleavable(m.type, m.cols) && gemm_reads_groups(m.type) && m.rows >= 8 && m.rows % 8 == 0;
  }
  const Matrix& matrix() const { return matrix_; }

 private:
  uint8_t* data() { return bytes_.data() + (64 - reinterpret_cast<uintptr_t>(bytes_.data()) % 64) % 64; }
  std::vector<uint8_t> bytes_;
  Matrix matrix_;
};

// The tile for a matrix's type, row length and layout, made at its first
// matrix (a grouped matrix's rows are whole groups, so its tile's are).
const Tile& tile_for(std::map<std::tuple<DType, int64_t, bool>, Tile>& tiles, const ProbeMatrix& m, std::mt19937& rng) {
  const bool grouped = ProbeWeights::grouped(m);
  auto [it, fresh] = tiles.try_emplace({m.type, m.cols, grouped});
  Tile& tile = it->second;
  if (fresh) {
    tile.rows = std::min(kTile, m.rows);
    tile.bytes = random_weights(m.type, tile.rows * m.cols, rng);
    if (grouped) {
      std::vector<uint8_t> x8(tile.bytes.size());
      interleave_rows(m.type, tile.bytes.data(), tile.rows, m.cols, x8.data());
      tile.bytes.swap(x8);
    }
  }
  return tile;
}

// Repeats fn until `seconds` have passed (at least three times) and
// returns the median time: a best time flatters a machine other work
// shares, and the layers will run in its usual conditions.
template <class Fn>
double median_seconds(Fn&& fn, double seconds, Clock::duration idle_before = {}) {
  std::vector<double> times;
  const Clock::time_point start = Clock::now();
  while (times.size() < 3 || (seconds_since(start) < seconds && times.size() < 1000)) {
    if (idle_before.count() > 0) std::this_thread::sleep_for(idle_before);
    const Clock::time_point t0 = Clock::now();
    fn();
    times.push_back(seconds_since(t0));
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace

std::string ProbeShape::name() const {
  std::string s = fmt::format("{} x {}", dtype_info(type).name, cols);
  if (!matrices.empty()) {
    size_t bytes = 0;
    for (const ProbeMatrix& m : matrices) bytes += matrix_bytes(m);
    s += fmt::format(", {} layer matrices ({:.1f} MiB)", matrices.size(), bytes / 1048576.0);
  }
  return s;
}

void check_probe_shape(const ProbeShape& shape) {
  auto check = [](uint32_t type, int64_t rows, int64_t cols) {
    if (!is_weight_type(type)) fail("probe: type {} is not a weight type", type);
    const int64_t block = dtype_info(static_cast<DType>(type)).block_size;
    if (cols <= 0 || cols > kMaxProbeCols || cols % block != 0)
      fail("probe: rows of {} values are not whole blocks of {} ({} values), or exceed {}", cols,
           dtype_info(static_cast<DType>(type)).name, block, kMaxProbeCols);
    if (rows <= 0 || rows > kMaxProbeRows) fail("probe: {} rows (1 to {})", rows, kMaxProbeRows);
  };
  check(static_cast<uint32_t>(shape.type), 1, shape.cols);
  if (shape.matrices.size() > kMaxProbeMatrices)
    fail("probe: {} matrices (at most {})", shape.matrices.size(), kMaxProbeMatrices);
  for (const ProbeMatrix& m : shape.matrices) check(static_cast<uint32_t>(m.type), m.rows, m.cols);
}

DeviceInfo probe_local_cpu(int threads, const ProbeShape& shape) {
  ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
  return probe_local_cpu(pool, shape);
}

DeviceInfo probe_local_cpu(ThreadPool& pool, const ProbeShape& shape) {
  check_probe_shape(shape);
  const Clock::time_point start = Clock::now();
  DeviceInfo info;
  info.address = "local";
  info.backend = "CPU";
  info.kind = "cpu";
  info.simd = cpu_simd_target();
  info.threads = pool.size();
  info.probe = shape.name();
  // Before allocating, so the probe's own buffers are not counted as used.
  const SystemMemory mem = read_system_memory();
  info.total_memory = mem.total;
  info.free_memory = mem.available;
  if (mem.total == 0) spdlog::warn("probe: cannot read /proc/meminfo; reporting no free memory");

  std::mt19937 rng(0x5EED);
  std::map<std::tuple<DType, int64_t, bool>, Tile> tiles;
  auto weights_for = [&](const ProbeMatrix& m) { return std::make_unique<ProbeWeights>(pool, m, tile_for(tiles, m, rng)); };
  std::vector<std::unique_ptr<ProbeWeights>> pass;
  const ProbeMatrix batched{shape.type,
                            std::max<int64_t>(kTile, static_cast<int64_t>(kMatmulBytes / row_bytes(shape.type, shape.cols)) /
                                                         kTile * kTile),
                            shape.cols};
  const std::unique_ptr<ProbeWeights> batch_weights = weights_for(batched);
  int64_t max_cols = shape.cols, max_out = kMatmulTokens * batched.rows;  // floats
  size_t pass_bytes = 0;
  for (const ProbeMatrix& m : decode_pass(shape)) {
    pass.push_back(weights_for(m));
    max_cols = std::max(max_cols, m.cols);
    max_out = std::max(max_out, m.rows);
    pass_bytes += matrix_bytes(m);
  }

  CpuBackend backend(pool, kMatmulTokens, max_cols);
  HostBuffer x(static_cast<size_t>(kMatmulTokens) * max_cols * sizeof(float));
  HostBuffer y(static_cast<size_t>(max_out) * sizeof(float));
  uint64_t state = 42;
  auto* xf = CpuBackend::floats(DevicePtr{&x, 0});
  for (int64_t i = 0; i < kMatmulTokens * max_cols; ++i)
    xf[i] = static_cast<float>(static_cast<int64_t>(next_random(state) % 2001) - 1000) / 1000.0f;

  // One decode pass: each matrix once for one token, in order, as a layer's
  // matmuls run.
  auto decode = [&] {
    for (const auto& w : pass) backend.matmul(w->matrix(), DevicePtr{&x, 0}, DevicePtr{&y, 0}, 1);
  };
  auto prefill = [&] { backend.matmul(batch_weights->matrix(), DevicePtr{&x, 0}, DevicePtr{&y, 0}, kMatmulTokens); };
  decode();  // warm-up: first-call dispatch, TLB
  const double mv_s = median_seconds(decode, kMatvecSeconds, kIdleBeforePass);
  const double mm_s = median_seconds(prefill, kMatmulSeconds);
  info.matvec_gbps = static_cast<double>(pass_bytes) / mv_s / 1e9;
  info.matmul_gflops = 2.0 * kMatmulTokens * batched.rows * batched.cols / mm_s / 1e9;

  spdlog::debug("probe ({}): {} threads, matvec {:.1f} GB/s ({:.2f} ms a pass of {} matrices), matmul {:.1f} GFLOP/s "
                "({:.2f} ms), {:.0f} ms total",
                info.probe, info.threads, info.matvec_gbps, mv_s * 1e3, pass.size(), info.matmul_gflops, mm_s * 1e3,
                seconds_since(start) * 1e3);
  return info;
}

}  // namespace shoal
