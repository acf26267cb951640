// CpuBackend::matmuls (Q, K and V, or gate and up, in one pass over the
// threads) gives each output the bits of its own matmul: whatever the
// thread count, the tokens, the row counts (not multiples of the 24-row
// units), the layout, and when the matrices' activations differ in type.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "random_blocks.h"
#include "tensor/gemm.h"
#include "tensor/interleave.h"
#include "util/thread_pool.h"

namespace shoal {
namespace {

constexpr int kMaxTokens = 8;
constexpr int64_t kCols = 512;

struct Weights {
  std::vector<uint8_t> bytes;
  Matrix m;
};

Weights make_weights(DType type, int64_t rows, bool grouped, std::mt19937& rng) {
  Weights w{random_weights(type, rows * kCols, rng), {}};
  if (grouped) {
    std::vector<uint8_t> copy(w.bytes.size());
    interleave_rows(type, w.bytes.data(), rows, kCols, copy.data());
    w.bytes.swap(copy);
  }
  w.m = Matrix{type, w.bytes.data(), rows, kCols, grouped};
  return w;
}

// Each output of one matmuls call, and of one matmul per matrix.
std::pair<std::vector<std::vector<float>>, std::vector<std::vector<float>>> run(CpuBackend& be,
                                                                                const std::vector<Weights>& ws,
                                                                                const std::vector<float>& x, int n) {
  auto xb = be.allocate(x.size() * sizeof(float));
  be.upload(DevicePtr{xb.get(), 0}, x.data(), x.size() * sizeof(float));
  std::vector<std::unique_ptr<Buffer>> together, alone;
  std::vector<Backend::MatmulOutput> outputs;
  for (const Weights& w : ws) {
    together.push_back(be.allocate(static_cast<size_t>(n) * w.m.rows * sizeof(float)));
    alone.push_back(be.allocate(static_cast<size_t>(n) * w.m.rows * sizeof(float)));
    outputs.push_back({&w.m, DevicePtr{together.back().get(), 0}});
    be.matmul(w.m, DevicePtr{xb.get(), 0}, DevicePtr{alone.back().get(), 0}, n);
  }
  be.matmuls(outputs, DevicePtr{xb.get(), 0}, n);
  std::pair<std::vector<std::vector<float>>, std::vector<std::vector<float>>> out;
  for (size_t i = 0; i < ws.size(); ++i) {
    const size_t count = static_cast<size_t>(n) * ws[i].m.rows;
    out.first.emplace_back(count);
    out.second.emplace_back(count);
    be.download(out.first.back().data(), DevicePtr{together[i].get(), 0}, count * sizeof(float));
    be.download(out.second.back().data(), DevicePtr{alone[i].get(), 0}, count * sizeof(float));
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CpuMatmuls, EachOutputHasTheBitsOfItsOwnMatmul) {
  ThreadPool one(1), two(2);
  CpuBackend serial(one, kMaxTokens, kCols), parallel(two, kMaxTokens, kCols);
  std::mt19937 rng(11);
  const std::vector<std::vector<DType>> sets = {
      {DType::Q5_0, DType::Q5_0, DType::Q5_0},  // Q, K, V of one type
      {DType::Q4_K, DType::Q6_K},               // one activation type (Q8_K), two weight types
      {DType::Q4_K, DType::Q8_0, DType::F16},   // three activation types: one pass each
      {DType::F16, DType::F16},
  };
  for (const auto& types : sets) {
    for (const bool grouped : {false, true}) {
      std::vector<Weights> ws;
      const int64_t rows[] = {80, 16, 45};  // chunks end inside outputs; a grouped tail of five
      for (size_t i = 0; i < types.size(); ++i) {
        // Groups only where this CPU's matmul reads them (the CPU backend's own rule).
        const bool g = grouped && interleavable(types[i], kCols) && gemm_reads_groups(types[i]);
        ws.push_back(make_weights(types[i], rows[i], g, rng));
      }
      for (const int n : {1, 4, 7}) {
        const std::vector<float> x = random_floats(n * kCols, rng);
        const auto [together, alone] = run(parallel, ws, x, n);
        const auto [together_serial, alone_serial] = run(serial, ws, x, n);
        for (size_t i = 0; i < ws.size(); ++i) {
          SCOPED_TRACE(testing::Message() << dtype_info(types[i]).name << " output " << i << ", " << n
                                          << " tokens, grouped " << grouped);
          EXPECT_TRUE(same_bits(together[i], alone[i]));
          EXPECT_TRUE(same_bits(together[i], together_serial[i]));
          EXPECT_TRUE(same_bits(alone[i], alone_serial[i]));
        }
      }
    }
  }
}

}  // namespace
}  // namespace shoal
