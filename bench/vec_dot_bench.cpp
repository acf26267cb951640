// Throughput of the matmul kernels per weight type, on one thread:
// - vec_dot: a 4096 x 4096 matvec (weights streamed from memory, as in
//   decode), and the same kernel on 16 rows that stay in cache (its compute
//   ceiling); the scalar reference beside it for the ratio;
// - gemm: gemm_rows (what CpuBackend::matmul runs) on 4096 x 4096 weights
//   for 1 token (decode: GB/s of weights) and for 4 (batched decode of four
//   streams), on 256 rows for 64 tokens (prefill; items/s are
//   multiply-adds throughout), and on 32768 rows for 1 token: 4096 rows of
//   most types fit a large L3 (32 MiB on a Zen 5 host), 32768 stream from
//   memory as a model's do; gemm_x8 the same on the weights in groups of
//   eight rows (the layout a model's layers get at load where the machine
//   reads it), and on 32768 rows for 4 tokens;
// - memory_read: the machine's read bandwidth on one thread (a 512 MiB sum),
//   the ceiling for decode's GB/s.
// GB/s counts weight bytes.
//
//   build/vec_dot_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "tensor/gemm.h"
#include "tensor/interleave.h"
#include "tensor/vec_dot.h"

namespace {

using shoal::DType;

constexpr int64_t kCols = 4096;

// Byte offsets of the f16 scales in a block, to overwrite random bytes with
// sane values (random halves would include inf and NaN).
std::vector<int> scale_offsets(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0: return {0};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

std::vector<uint8_t> random_matrix(DType type, int64_t rows, std::mt19937& rng) {
  const shoal::DTypeInfo& info = shoal::dtype_info(type);
  std::vector<uint8_t> m(static_cast<size_t>(rows) * shoal::row_bytes(type, kCols));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t nblocks = m.size() / info.block_bytes;
  for (size_t i = 0; i < nblocks; ++i) {
    uint8_t* p = m.data() + i * info.block_bytes;
    if (type == DType::F32) {
      const float v = normal(rng);
      std::memcpy(p, &v, 4);
    } else if (type == DType::F16 || type == DType::BF16) {
      const float v = normal(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = type == DType::F16 ? shoal::f32_to_f16(v) : static_cast<uint16_t>(bits >> 16);
      std::memcpy(p, &h, 2);
    } else {
      for (int b = 0; b < info.block_bytes; ++b) p[b] = static_cast<uint8_t>(rng());
      for (int off : scale_offsets(type)) {
        const uint16_t h = shoal::f32_to_f16(0.01f);
        std::memcpy(p + off, &h, 2);
      }
    }
  }
  return m;
}

void BM_VecDot(benchmark::State& state, DType type, bool reference) {
  const int64_t rows = state.range(0);
  std::mt19937 rng(42);
  const auto weights = random_matrix(type, rows, rng);
  std::vector<float> x(kCols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  std::vector<uint8_t> act(shoal::row_bytes(shoal::activation_dtype(type), kCols));
  shoal::quantize_activation(type, x.data(), act.data(), kCols);
  const size_t row_bytes = shoal::row_bytes(type, kCols);
  std::vector<float> out(static_cast<size_t>(rows));
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      const void* w = weights.data() + r * row_bytes;
      out[r] = reference ? shoal::vec_dot_reference(type, w, act.data(), kCols)
                         : shoal::vec_dot(type, w, act.data(), kCols);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(weights.size()));
}

void BM_Gemm(benchmark::State& state, DType type, bool grouped) {
  const int64_t rows = state.range(0);
  const int n_tokens = static_cast<int>(state.range(1));
  std::mt19937 rng(42);
  auto weights = random_matrix(type, rows, rng);
  if (grouped) {
    std::vector<uint8_t> copy(weights.size());
    shoal::interleave_rows(type, weights.data(), rows, kCols, copy.data());
    weights.swap(copy);
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t act_row = shoal::row_bytes(shoal::activation_dtype(type), kCols);
  std::vector<uint8_t> act(act_row * n_tokens);
  std::vector<float> x(kCols);
  for (int t = 0; t < n_tokens; ++t) {
    for (auto& v : x) v = normal(rng);
    shoal::quantize_activation(type, x.data(), act.data() + t * act_row, kCols);
  }
  std::vector<float> out(static_cast<size_t>(rows) * n_tokens);
  for (auto _ : state) {
    shoal::gemm_rows(shoal::Matrix{type, weights.data(), rows, kCols, grouped}, 0, rows, act.data(), act_row,
                     n_tokens, out.data(), rows);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(weights.size()));
  state.SetItemsProcessed(state.iterations() * rows * kCols * n_tokens);
}

void BM_MemoryRead(benchmark::State& state) {
  std::vector<uint64_t> buffer((512ull << 20) / 8, 1);
  for (auto _ : state) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < buffer.size(); i += 4) {
      s0 += buffer[i];
      s1 += buffer[i + 1];
      s2 += buffer[i + 2];
      s3 += buffer[i + 3];
    }
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(buffer.size() * 8));
}

void BM_QuantizeActivation(benchmark::State& state, DType weight) {
  std::vector<float> x(kCols);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  std::vector<uint8_t> act(shoal::row_bytes(shoal::activation_dtype(weight), kCols));
  for (auto _ : state) {
    shoal::quantize_activation(weight, x.data(), act.data(), kCols);
    benchmark::DoNotOptimize(act.data());
  }
  state.SetBytesProcessed(state.iterations() * kCols * static_cast<int64_t>(sizeof(float)));
}

}  // namespace

int main(int argc, char** argv) {
  const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                         DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                         DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (const DType t : types) {
    const std::string name(shoal::dtype_info(t).name);
    benchmark::RegisterBenchmark(("vec_dot/" + name).c_str(), BM_VecDot, t, false)
        ->Arg(4096)->Arg(16)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("vec_dot_reference/" + name).c_str(), BM_VecDot, t, true)
        ->Arg(16)->Unit(benchmark::kMicrosecond);
  }
  for (const DType t : types) {
    const std::string name(shoal::dtype_info(t).name);
    benchmark::RegisterBenchmark(("gemm/" + name).c_str(), BM_Gemm, t, false)
        ->Args({4096, 1})->Args({4096, 4})->Args({256, 64})->Args({32768, 1})->Unit(benchmark::kMicrosecond);
    if (shoal::interleavable(t, kCols) && shoal::gemm_reads_groups(t))
      benchmark::RegisterBenchmark(("gemm_x8/" + name).c_str(), BM_Gemm, t, true)
          ->Args({4096, 1})->Args({4096, 4})->Args({256, 64})->Args({32768, 1})->Args({32768, 4})
          ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("memory_read", BM_MemoryRead)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("quantize_activation/Q8_0", BM_QuantizeActivation, DType::Q8_0);
  benchmark::RegisterBenchmark("quantize_activation/Q8_K", BM_QuantizeActivation, DType::Q4_K);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
