// The CPU attention kernel against its scalar double reference, for each KV
// cache type, grouped-query shapes, odd head sizes, sliding windows and
// contexts of several chunks; and the determinism it promises: the same bits
// for any thread count, and for a query alone (decode, chunks spread over
// threads) or inside a batch (whole queries per thread).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/random_kv_cache.h"
#include "util/thread_pool.h"

namespace shoal {
namespace {

struct Case {
  int n_head, n_head_kv, head_dim;
  DType k_type, v_type;
  int window;
};

std::vector<float> run(ThreadPool& pool, const Case& c, const KvLayerView& kv, const std::vector<float>& q,
                       const std::vector<int32_t>& positions) {
  const int n = static_cast<int>(positions.size());
  std::vector<int32_t> seqs(n, 0);
  std::vector<float> out(static_cast<size_t>(n) * c.n_head * c.head_dim, NAN);
  AttentionScratch scratch;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  cpu_attention(pool, q.data(), kv, seqs.data(), positions.data(), n,
                AttentionShape{c.n_head, c.n_head_kv, c.head_dim, scale, c.window}, out.data(), scratch);
  return out;
}

class AttentionKernel : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionKernel, MatchesReferenceAndKeepsItsBits) {
  const Case c = GetParam();
  std::mt19937 rng(1234 + c.head_dim * 7 + c.n_head);
  const int n_pos = 3 * kAttentionChunk + 37;  // several chunks and a partial one
  RandomKvCache cache(c.k_type, c.v_type, c.n_head_kv * c.head_dim, n_pos, rng);
  // A batch of 24 queries ending at the last position, and that last query alone.
  const int n = 24;
  std::vector<int32_t> positions(n);
  for (int t = 0; t < n; ++t) positions[t] = n_pos - n + t;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n) * c.n_head * c.head_dim);
  for (float& x : q) x = dist(rng);

  ThreadPool one(1), three(3);
  const std::vector<float> batch1 = run(one, c, cache.view, q, positions);
  const std::vector<float> batch3 = run(three, c, cache.view, q, positions);
  EXPECT_EQ(0, std::memcmp(batch1.data(), batch3.data(), batch1.size() * sizeof(float))) << "1 vs 3 threads";

  // The last query alone runs in chunks spread over threads: same bits.
  const size_t q_row = static_cast<size_t>(c.n_head) * c.head_dim;
  const std::vector<float> last_q(q.end() - q_row, q.end());
  const std::vector<float> alone = run(three, c, cache.view, last_q, {n_pos - 1});
  EXPECT_EQ(0, std::memcmp(alone.data(), batch1.data() + (n - 1) * q_row, q_row * sizeof(float)))
      << "alone vs in a batch";

  // Against the double reference. The kernel sums up to kAttentionChunk
  // products per chunk in f32 and merges a few chunks; over 500 positions of
  // unit-sized values the rounding is bounded by about n * 2^-24 relative to
  // the magnitudes involved: 1e-4 on outputs of order 1 leaves no room for a
  // wrong weight or a missed position (those move outputs by > 1e-2).
  std::vector<float> ref(batch1.size());
  std::vector<int32_t> seqs(n, 0);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  cpu_attention_reference(q.data(), cache.view, seqs.data(), positions.data(), n,
                          AttentionShape{c.n_head, c.n_head_kv, c.head_dim, scale, c.window}, ref.data());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(ref[i]) - batch1[i]));
  EXPECT_LT(worst, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionKernel,
    ::testing::Values(Case{4, 4, 8, DType::F32, DType::F32, 0},       // stories260K-like, no GQA
                      Case{9, 3, 64, DType::F16, DType::F16, 0},      // SmolLM2: groups of 3
                      Case{14, 2, 64, DType::F16, DType::F16, 0},     // Qwen2.5 0.5B: groups of 7
                      Case{14, 2, 64, DType::Q8_0, DType::Q8_0, 0},   // -ctk q8_0 -ctv q8_0
                      Case{8, 2, 64, DType::F32, DType::Q8_0, 0},     // mixed types
                      Case{4, 1, 256, DType::F16, DType::F16, 100},   // Gemma 3 270M, sliding window
                      Case{8, 4, 4, DType::F16, DType::F32, 0},       // llama-2-tiny-random: head size 4
                      Case{3, 1, 40, DType::F16, DType::F16, 30},     // an odd head size with a window
                      Case{32, 1, 96, DType::F16, DType::F16, 0},     // a wide group
                      Case{6, 6, 80, DType::F16, DType::F16, 0}));    // no GQA, ten vectors a head: a tile of 8 and one of 2

TEST(AttentionKernel, RefusesShapesItCannotHold) {
  ThreadPool pool(1);
  const Case c{256, 1, 64, DType::F32, DType::F32, 0};
  std::mt19937 rng(1);
  RandomKvCache cache(c.k_type, c.v_type, c.n_head_kv * c.head_dim, 4, rng);
  std::vector<float> q(256 * 64, 0.0f);
  EXPECT_ANY_THROW(run(pool, c, cache.view, q, {3}));  // 256 query heads per KV head (at most 128)
}

}  // namespace
}  // namespace shoal
