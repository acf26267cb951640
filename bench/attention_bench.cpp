// Throughput of the CPU attention kernel on one thread, in multiply-adds per
// second (q . k and p * v each count head size per position and head):
// - decode: one query at position 2047 (the chunks spread and merged);
// - prefill: 512 queries at positions 0..511, each seeing its own prefix.
// Shapes are Qwen2.5-0.5B's (14 query heads, 2 KV heads, head size 64) and
// a model without GQA (8 heads of 128, as Llama 2 7B's layers); the cache
// holds f16 (the default) or Q8_0 (-ctk/-ctv q8_0).
//
//   build/attention_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/random_kv_cache.h"
#include "tensor/dtype.h"
#include "util/thread_pool.h"

namespace {

using shoal::DType;

constexpr int kPositions = 2048;  // cache positions

// args: query count (1: decode at the last position), query heads, KV heads, head size.
void BM_attention(benchmark::State& state, DType type) {
  const int n = static_cast<int>(state.range(0)), n_head = static_cast<int>(state.range(1));
  const int n_kv = static_cast<int>(state.range(2)), d = static_cast<int>(state.range(3));
  std::mt19937 rng(2);
  shoal::RandomKvCache cache(type, type, n_kv * d, kPositions, rng);
  std::vector<int32_t> positions(n), seqs(n, 0);
  for (int t = 0; t < n; ++t) positions[t] = n == 1 ? kPositions - 1 : t;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n) * n_head * d), out(q.size());
  for (auto& x : q) x = normal(rng);
  shoal::ThreadPool pool(1);
  shoal::AttentionScratch scratch;
  const shoal::AttentionShape shape{n_head, n_kv, d, 1.0f / std::sqrt(static_cast<float>(d)), 0};
  for (auto _ : state) {
    shoal::cpu_attention(pool, q.data(), cache.view, seqs.data(), positions.data(), n, shape, out.data(), scratch);
    benchmark::DoNotOptimize(out.data());
  }
  int64_t macs = 0;
  for (int p : positions) macs += static_cast<int64_t>(p + 1) * n_head * d * 2;
  state.SetItemsProcessed(state.iterations() * macs);
}

BENCHMARK_CAPTURE(BM_attention, f16, DType::F16)
    ->ArgNames({"queries", "heads", "kv_heads", "head_size"})
    ->Args({1, 14, 2, 64})
    ->Args({512, 14, 2, 64})
    ->Args({1, 8, 8, 128})
    ->Args({512, 8, 8, 128})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, q8_0, DType::Q8_0)
    ->ArgNames({"queries", "heads", "kv_heads", "head_size"})
    ->Args({1, 14, 2, 64})
    ->Args({512, 14, 2, 64})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
