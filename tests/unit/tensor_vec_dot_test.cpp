// vec_dot (SIMD, on every compiled Highway target) against vec_dot_reference,
// and vec_dot_reference against a plain dot of the dequantized rows, for
// every weight type, on random blocks with sane f16 scales.
//
// Tolerances are relative to sum_i |w_i * a_i| (the scale of the rounding
// error of any summation order), per type below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hwy/targets.h"
#include "tensor/blocks.h"
#include "tensor/dequantize.h"
#include "tensor/dtype.h"
#include "tensor/gemm.h"
#include "tensor/interleave.h"
#include "tensor/quantize.h"
#include "tensor/simd_targets.h"
#include "tensor/vec_dot.h"
#include "random_blocks.h"
#include "util/error.h"
#include "target_guard.h"

namespace shoal {
namespace {

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4};
// The types in the recorded cross-target digests below (MXFP4 came after
// they were recorded on an AVX-512 host, and this one has none to record it).
const DType kDigestTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                              DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K};

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// SIMD vs reference: the two differ only in float summation order. Float
// rows sum n products (n up to 1000 here); quantized rows sum one exact
// integer per block, so only a few float roundings per block remain.
double simd_tolerance(DType t) { return is_float(t) ? 2e-6 : 1e-6; }

// Row lengths for a matmul test: float rows of `odd` values (a zero-padded
// last vector; plain only) and the next whole runs (which also group);
// quantized rows of `blocks` blocks.
std::vector<int64_t> widths(DType t, int64_t odd, int64_t blocks) {
  if (is_float(t)) return {odd, (odd / kFloatRun + 1) * kFloatRun};
  return {blocks * dtype_info(t).block_size};
}

// A buffer holding `bytes` at a chosen misalignment from a 64-byte boundary.
struct Misaligned {
  Misaligned(const std::vector<uint8_t>& bytes, size_t shift) : storage(bytes.size() + 128) {
    const auto addr = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + ((64 - addr % 64) % 64) + shift;
    std::memcpy(data, bytes.data(), bytes.size());
  }
  std::vector<uint8_t> storage;
  uint8_t* data;
};

struct Case {
  DType type;
  int64_t n;
  std::vector<uint8_t> weights;
  std::vector<uint8_t> activation;  // in activation_dtype(type)
  double magnitude;                 // sum |w_i * a_i| of the dequantized values
  double exact;                     // sum w_i * a_i in double
};

Case make_case(DType type, int64_t n, std::mt19937& rng) {
  Case c{type, n, random_weights(type, n, rng), {}, 0, 0};
  const DType act = activation_dtype(type);
  c.activation.resize(row_bytes(act, n));
  const auto x = random_floats(n, rng);
  quantize_activation(type, x.data(), c.activation.data(), n);
  std::vector<float> w(static_cast<size_t>(n)), a(static_cast<size_t>(n));
  dequantize_row(type, c.weights.data(), w.data(), n);
  dequantize_row(act, c.activation.data(), a.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    c.magnitude += std::fabs(double(w[i]) * a[i]);
    c.exact += double(w[i]) * a[i];
  }
  return c;
}

std::vector<int64_t> sizes(DType type) {
  if (is_float(type)) return {1, 3, 7, 8, 15, 16, 17, 31, 64, 100, 257, 1000};
  const int64_t block = dtype_info(type).block_size;
  std::vector<int64_t> out;
  for (int64_t nb : {1, 2, 3, 5, 8, 13}) out.push_back(nb * block);
  return out;
}

TEST(TensorVecDot, MatchesReferenceOnEveryTarget) {
  TargetGuard guard;
  std::mt19937 rng(1234);
  for (const DType type : kAllTypes) {
    SCOPED_TRACE(dtype_info(type).name);
    for (const int64_t n : sizes(type)) {
      const Case c = make_case(type, n, rng);
      ASSERT_GT(c.magnitude, 0.0) << "degenerate test input";
      // Weights at 1 and 3 bytes past a 64-byte boundary; activations at 1
      // byte (blocks) or 4 bytes (floats keep their natural alignment).
      const size_t act_shift = is_float(type) ? 4 : 1;
      for (const size_t shift : {size_t{1}, size_t{3}}) {
        const Misaligned w(c.weights, shift), a(c.activation, act_shift);
        const float ref = vec_dot_reference(type, w.data, a.data, n);
        for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
          hwy::SetSupportedTargetsForTest(target);
          const float simd = vec_dot(type, w.data, a.data, n);
          ASSERT_LE(std::fabs(double(simd) - ref), simd_tolerance(type) * c.magnitude)
              << hwy::TargetName(target) << " n=" << n << " simd=" << simd << " ref=" << ref;
        }
        hwy::SetSupportedTargetsForTest(0);
      }
    }
  }
}

// AVX3_DL code may hold VEX-encoded VNNI (Highway 1.0.3 builds it with GCC's
// avxvnni flag), so it is offered only where the CPU has AVX-VNNI; on a
// Zen 4 or Ice Lake host the test above stopped on an illegal instruction.
TEST(TensorVecDot, Avx3DlIsOfferedOnlyWithAvxVnni) {
  const bool offered = (hwy::SupportedTargets() & HWY_AVX3_DL) != 0;
  EXPECT_TRUE(!offered || cpu_has_avx_vnni()) << "AVX3_DL offered on a CPU without AVX-VNNI";
}

// The targets this CPU runs of AVX2 and AVX-512 (with and without VNNI).
bool is_wide(int64_t target) { return target == HWY_AVX2 || target == HWY_AVX3 || target == HWY_AVX3_DL; }
std::vector<int64_t> wide_targets() {
  std::vector<int64_t> wide;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets())
    if (is_wide(target)) wide.push_back(target);
  return wide;
}

// AVX2 and AVX-512 use the same lane grouping (8-lane chains; AVX-512 holds
// two chains in one register for float weights, and VNNI adds byte products
// without the int16 step, neither of which may change a bit), so every x86
// machine gives the same bits and machines of either kind agree in a
// distributed run. (SSE4 and SSSE3 differ in the last bits; so does NEON.)
// To check that on every host, an AVX2-only one included, digests of
// vec_dot and of the tiled matmul on fixed inputs are recorded here; every
// such target this CPU runs must reproduce them. Recorded 2026-12-04 on an
// AVX-512 host, where AVX2 and AVX3 gave them alike. A change to the kernels'
// arithmetic changes them: update them only when that is meant.
constexpr uint64_t kVecDotBits = 10443834263402616374ull;
constexpr uint64_t kGemmBits = 16125373128414369482ull;

uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint64_t vec_dot_digest() {
  std::mt19937 rng(77);
  uint64_t h = 0xcbf29ce484222325ull;
  for (const DType type : kDigestTypes)
    for (const int64_t n : sizes(type)) {
      const Case c = make_case(type, n, rng);
      const float r = vec_dot(type, c.weights.data(), c.activation.data(), n);
      h = fnv1a(h, &r, sizeof(r));
    }
  return h;
}

uint64_t gemm_digest() {
  std::mt19937 rng(78);
  uint64_t h = 0xcbf29ce484222325ull;
  constexpr int64_t kRows = 43;
  constexpr int kTokens = 13;
  for (const DType type : kDigestTypes)
    for (const int64_t n : widths(type, 203, 5)) {
      const size_t a_row = row_bytes(activation_dtype(type), n);
      std::vector<uint8_t> w;
      for (int64_t r = 0; r < kRows; ++r) {
        const auto row = random_weights(type, n, rng);
        w.insert(w.end(), row.begin(), row.end());
      }
      std::vector<uint8_t> act(a_row * kTokens);
      for (int t = 0; t < kTokens; ++t) quantize_activation(type, random_floats(n, rng).data(), act.data() + t * a_row, n);
      std::vector<uint8_t> grouped_bytes(w.size());
      if (interleavable(type, n)) interleave_rows(type, w.data(), kRows, n, grouped_bytes.data());
      const Matrix plain{type, w.data(), kRows, n}, grouped{type, grouped_bytes.data(), kRows, n, true};
      for (const Matrix& m : {plain, grouped}) {
        if (m.interleaved && !interleavable(type, n)) continue;
        std::vector<float> y(kRows * kTokens, NAN);
        gemm_rows(m, 0, 24, act.data(), a_row, kTokens, y.data(), kRows);
        gemm_rows(m, 24, kRows, act.data(), a_row, kTokens, y.data(), kRows);
        h = fnv1a(h, y.data(), y.size() * sizeof(float));
      }
    }
  return h;
}

TEST(TensorVecDot, EveryWideTargetGivesTheRecordedBits) {
  TargetGuard guard;
  const std::vector<int64_t> wide = wide_targets();
  if (wide.empty()) GTEST_SKIP() << "not an x86 CPU with AVX2 (other CPUs round in their own lane order)";
  for (const int64_t target : wide) {
    hwy::SetSupportedTargetsForTest(target);
    EXPECT_EQ(vec_dot_digest(), kVecDotBits) << "vec_dot on " << hwy::TargetName(target) << std::hex;
    EXPECT_EQ(gemm_digest(), kGemmBits) << "the tiled matmul on " << hwy::TargetName(target) << std::hex;
  }
}

// The reference against the format description itself: dequantize both
// rows and take a double-precision dot.
TEST(TensorVecDot, ReferenceMatchesDequantizedDot) {
  std::mt19937 rng(99);
  for (const DType type : kAllTypes) {
    SCOPED_TRACE(dtype_info(type).name);
    for (const int64_t n : sizes(type)) {
      const Case c = make_case(type, n, rng);
      const float ref = vec_dot_reference(type, c.weights.data(), c.activation.data(), n);
      const double tol = (is_float(type) ? 2e-6 : 1e-6) * c.magnitude;
      ASSERT_LE(std::fabs(ref - c.exact), tol) << "n=" << n << " ref=" << ref << " exact=" << c.exact;
    }
  }
}

// Same inputs, same bits: repeated calls and calls from other threads.
TEST(TensorVecDot, Deterministic) {
  std::mt19937 rng(5);
  for (const DType type : kAllTypes) {
    const int64_t n = is_float(type) ? 999 : 8 * dtype_info(type).block_size;
    const Case c = make_case(type, n, rng);
    const float first = vec_dot(type, c.weights.data(), c.activation.data(), n);
    std::vector<float> results(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < results.size(); ++t)
      threads.emplace_back([&, t] {
        for (int k = 0; k < 10; ++k) results[t] = vec_dot(type, c.weights.data(), c.activation.data(), n);
      });
    for (auto& t : threads) t.join();
    for (float r : results) EXPECT_EQ(std::memcmp(&r, &first, 4), 0) << dtype_info(type).name;
  }
}

// A weight row quantized by Shoal's own encoder dotted with a Q8 activation
// stays close to the float dot of the original values.
TEST(TensorVecDot, QuantizedDotApproximatesFloatDot) {
  std::mt19937 rng(17);
  const int64_t n = 4096;
  const auto w = random_floats(n, rng), x = random_floats(n, rng);
  double exact = 0, magnitude = 0;
  for (int64_t i = 0; i < n; ++i) {
    exact += double(w[i]) * x[i];
    magnitude += std::fabs(double(w[i]) * x[i]);
  }
  for (const DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    std::vector<uint8_t> wq(row_bytes(type, n)), xq(row_bytes(DType::Q8_0, n));
    quantize_row_reference(type, w.data(), wq.data(), n);
    quantize_activation(type, x.data(), xq.data(), n);
    const float got = vec_dot(type, wq.data(), xq.data(), n);
    // Error relative to sum |w x|: ~0.5% for 8 bits, ~10% for 4 bits worst-ish.
    EXPECT_LT(std::fabs(got - exact), (type == DType::Q8_0 ? 0.01 : 0.05) * magnitude) << dtype_info(type).name;
  }
}

TEST(TensorVecDot, RejectsBadInput) {
  uint8_t zeros[1024] = {};
  EXPECT_THROW(vec_dot(DType::Q4_0, zeros, zeros, 48), Error);
  EXPECT_THROW(vec_dot(DType::Q4_K, zeros, zeros, 128), Error);
  EXPECT_THROW(vec_dot(DType::Q8_1, zeros, zeros, 32), Error);
  EXPECT_THROW(vec_dot(DType::Q8_K, zeros, zeros, 256), Error);
  EXPECT_THROW(vec_dot_reference(DType::Q5_1, zeros, zeros, 33), Error);
  EXPECT_EQ(vec_dot(DType::Q4_K, zeros, zeros, 0), 0.0f);
}

// gemm_rows, the matmul kernel: every element within the reference's
// tolerance on every target, and the same bits whatever the tile a token
// lands in (batches of 1..9 tokens), whatever the row range a thread takes,
// and (on targets that have it) whether the rows are in groups of eight.
// A grouped head serves the embedding lookup: every row, in a group or in
// the plain tail, comes back out byte for byte, and looks up to the floats
// of the plain matrix.
TEST(TensorInterleave, EveryRowComesBackOutOfItsGroup) {
  std::mt19937 rng(99);
  constexpr int64_t kRows = 21;  // two groups of eight and a tail of five
  for (const DType type : kAllTypes) {
    const int64_t n = is_float(type) ? 3 * kFloatRun : 3 * dtype_info(type).block_size;
    if (!interleavable(type, n)) continue;
    SCOPED_TRACE(dtype_info(type).name);
    const auto w = random_weights(type, kRows * n, rng);
    std::vector<uint8_t> grouped_bytes(w.size());
    interleave_rows(type, w.data(), kRows, n, grouped_bytes.data());
    ASSERT_NE(0, std::memcmp(w.data(), grouped_bytes.data(), w.size()));
    const Matrix plain{type, w.data(), kRows, n}, grouped{type, grouped_bytes.data(), kRows, n, true};
    std::vector<uint8_t> scratch;
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < kRows; ++r) {
      ASSERT_EQ(0, std::memcmp(plain_row(grouped, r, scratch), plain.row(r), plain.row_stride())) << "row " << r;
      ids.push_back(static_cast<int32_t>(kRows - 1 - r));
    }
    std::vector<float> from_plain(kRows * n), from_groups(kRows * n);
    dequantize_rows(plain, ids.data(), kRows, from_plain.data());
    dequantize_rows(grouped, ids.data(), kRows, from_groups.data());
    EXPECT_EQ(0, std::memcmp(from_plain.data(), from_groups.data(), from_plain.size() * sizeof(float)));
    const int32_t outside = kRows;
    EXPECT_THROW(dequantize_rows(grouped, &outside, 1, from_groups.data()), Error);
  }
}

TEST(TensorGemm, MatchesReferenceAndIsBatchInvariantOnEveryTarget) {
  TargetGuard guard;
  std::mt19937 rng(4321);
  constexpr int64_t kRows = 37, kTokens = 9;
  for (const DType type : kAllTypes)
    for (const int64_t n : widths(type, 100, 3)) {
      SCOPED_TRACE(std::string(dtype_info(type).name) + " n=" + std::to_string(n));
      const DType act_type = activation_dtype(type);
      const size_t w_row = row_bytes(type, n), a_row = row_bytes(act_type, n);
      std::vector<uint8_t> w;
      for (int64_t r = 0; r < kRows; ++r) {
        const auto row = random_weights(type, n, rng);
        w.insert(w.end(), row.begin(), row.end());
      }
      std::vector<uint8_t> act(a_row * kTokens);
      for (int t = 0; t < kTokens; ++t) {
        const auto x = random_floats(n, rng);
        quantize_activation(type, x.data(), act.data() + t * a_row, n);
      }
      const Matrix plain{type, w.data(), kRows, n};
      std::vector<uint8_t> grouped_bytes(w.size());
      if (interleavable(type, n)) interleave_rows(type, w.data(), kRows, n, grouped_bytes.data());
      const Matrix grouped{type, grouped_bytes.data(), kRows, n, true};
      for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        SCOPED_TRACE(hwy::TargetName(target));
        // All tokens at once, rows in two ranges (a group of eight and the rest).
        std::vector<float> all(kRows * kTokens, NAN);
        gemm_rows(plain, 0, 8, act.data(), a_row, kTokens, all.data(), kRows);
        gemm_rows(plain, 8, kRows, act.data(), a_row, kTokens, all.data(), kRows);
        // Rows split at 5: other rows go alone or eight at a time.
        std::vector<float> split5(kRows * kTokens, NAN);
        gemm_rows(plain, 0, 5, act.data(), a_row, kTokens, split5.data(), kRows);
        gemm_rows(plain, 5, kRows, act.data(), a_row, kTokens, split5.data(), kRows);
        ASSERT_EQ(0, std::memcmp(all.data(), split5.data(), all.size() * sizeof(float))) << "row ranges change the result";
        // Float groups are read on every fixed-width target; quantized ones from AVX2 up.
        const bool have_groups = interleavable(type, n) && (is_float(type) || is_wide(target));
        if (have_groups) {
          std::vector<float> from_groups(kRows * kTokens, NAN);
          gemm_rows(grouped, 0, 16, act.data(), a_row, kTokens, from_groups.data(), kRows);
          gemm_rows(grouped, 16, kRows, act.data(), a_row, kTokens, from_groups.data(), kRows);
          ASSERT_EQ(0, std::memcmp(all.data(), from_groups.data(), all.size() * sizeof(float)))
              << "groups of eight change the result";
        }
        for (int t = 0; t < kTokens; ++t) {
          std::vector<float> alone(kRows, NAN);
          gemm_rows(plain, 0, kRows, act.data() + t * a_row, a_row, 1, alone.data(), kRows);
          if (have_groups) {  // decode, which reads groups its own way
            std::vector<float> alone_grouped(kRows, NAN);
            gemm_rows(grouped, 0, kRows, act.data() + t * a_row, a_row, 1, alone_grouped.data(), kRows);
            ASSERT_EQ(0, std::memcmp(alone.data(), alone_grouped.data(), kRows * sizeof(float)))
                << "token " << t << " alone: groups of eight change the result";
          }
          for (int64_t r = 0; r < kRows; ++r) {
            const float got = all[t * kRows + r];
            ASSERT_EQ(std::memcmp(&got, &alone[r], 4), 0) << "token " << t << " row " << r << ": " << got << " in a batch, "
                                                          << alone[r] << " alone";
            const uint8_t* wr = w.data() + r * w_row;
            const uint8_t* ar = act.data() + t * a_row;
            std::vector<float> wf(n), af(n);
            dequantize_row(type, wr, wf.data(), n);
            dequantize_row(act_type, ar, af.data(), n);
            double magnitude = 0;
            for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(double(wf[i]) * af[i]);
            const float ref = vec_dot_reference(type, wr, ar, n);
            ASSERT_LE(std::fabs(double(got) - ref), simd_tolerance(type) * magnitude)
                << "token " << t << " row " << r << " got " << got << " ref " << ref;
          }
        }
      }
      hwy::SetSupportedTargetsForTest(0);
    }
}

}  // namespace
}  // namespace shoal
