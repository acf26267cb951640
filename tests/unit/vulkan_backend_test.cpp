// The Vulkan backend's ops on this machine's Vulkan device (lavapipe here,
// a GPU where there is one), each against a double reference or the CPU
// backend on the same inputs, for every weight type, odd shapes and each KV
// cache type; and the determinism a backend promises: a row's bits do not
// depend on what else is in the batch.
//
// Tolerances, and why:
// - matmul against the double reference: the shader sums f32 products of
//   the exactly dequantized weights in one fixed order; any order's rounding
//   is a few ulp of sum |w x|: 1e-5 of it.
// - matmul against the CPU: the CPU multiplies by activations rounded to the
//   weight type's partner (Q8_0, Q8_K, F16 or BF16: vec_dot.h), so the two
//   differ by at most sum |w_i| * (activation rounding bound of x_i), plus
//   the summation term above.
// - element-wise ops, norms: GLSL lets exp, tanh and division err by a few
//   ulp (exp by 3 + 2|x| ulp); with |x| < 8 that is below 1e-5 relative.
// - rope: the host computes each angle's cos and sin in double as the CPU
//   does, so only the rotation's two products and a sum remain, which a
//   shader compiler may fuse: a few ulp, 1e-6 of the head's largest value.
// - attention: both read the same cache bytes; exp's few ulp and the
//   summation order leave 1e-4 of the largest |v|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/vulkan_devices.h"
#include "random_blocks.h"
#include "tensor/dequantize.h"
#include "tensor/vec_dot.h"
#include "util/thread_pool.h"

namespace shoal {
namespace {

constexpr int kMaxTokens = 16;
constexpr int64_t kMaxCols = 4096;

class VulkanOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    const auto devices = list_vulkan_devices(&why);
    if (devices.empty() && !std::getenv("SHOAL_REQUIRE_MODELS")) return;  // each test skips
    ASSERT_FALSE(devices.empty()) << "no Vulkan device (" << why
                                  << "): scripts/setup installs mesa-vulkan-drivers, whose lavapipe is one";
    pool_ = new ThreadPool(2);
    vulkan_ = new VulkanBackend(default_vulkan_device(devices), kMaxTokens);
    std::printf("[ vulkan ] device: %s\n", vulkan_->name().c_str());
    cpu_ = new CpuBackend(*pool_, kMaxTokens, kMaxCols);
  }
  void SetUp() override {
    if (!vulkan_) GTEST_SKIP() << "no Vulkan device (scripts/setup installs mesa-vulkan-drivers)";
  }
  static void TearDownTestSuite() {
    delete vulkan_;
    delete cpu_;
    delete pool_;
  }

  // A buffer on `be` holding `values`, and a read back.
  static std::unique_ptr<Buffer> put(Backend& be, const std::vector<float>& values) {
    auto b = be.allocate(values.size() * sizeof(float));
    be.upload(DevicePtr{b.get(), 0}, values.data(), values.size() * sizeof(float));
    return b;
  }
  static std::vector<float> get(Backend& be, Buffer* b, size_t n) {
    std::vector<float> out(n);
    be.download(out.data(), DevicePtr{b, 0}, n * sizeof(float));
    return out;
  }
  static std::vector<float> matmul(Backend& be, const Matrix& w, const std::vector<float>& x, int n) {
    auto xb = put(be, x);
    auto yb = be.allocate(static_cast<size_t>(n) * w.rows * sizeof(float));
    be.matmul(w, DevicePtr{xb.get(), 0}, DevicePtr{yb.get(), 0}, n);
    return get(be, yb.get(), static_cast<size_t>(n) * w.rows);
  }

  static ThreadPool* pool_;
  static VulkanBackend* vulkan_;
  static CpuBackend* cpu_;
};
ThreadPool* VulkanOps::pool_ = nullptr;
VulkanBackend* VulkanOps::vulkan_ = nullptr;
CpuBackend* VulkanOps::cpu_ = nullptr;

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K};

// How far the CPU's rounded activation of x[i] may be from x[i].
std::vector<double> activation_error(DType weight, const float* x, int64_t n) {
  const DType act = activation_dtype(weight);
  std::vector<double> err(static_cast<size_t>(n), 0.0);
  const int64_t block = dtype_info(act).block_size;
  for (int64_t b = 0; b < n; b += block) {
    double amax = 0.0;
    for (int64_t i = b; i < std::min(n, b + block); ++i) amax = std::max(amax, std::fabs(double(x[i])));
    for (int64_t i = b; i < std::min(n, b + block); ++i) {
      const double xi = std::fabs(double(x[i]));
      if (act == DType::Q8_0) err[i] = amax / 254 + amax / 2048;  // half a step, and the f16 scale
      else if (act == DType::Q8_K) err[i] = amax / 254;
      else if (act == DType::F16) err[i] = xi / 2048;
      else if (act == DType::BF16) err[i] = xi / 256;
    }
  }
  return err;
}

TEST_F(VulkanOps, MatmulEveryTypeAgainstReferenceAndCpu) {
  std::mt19937 rng(7);
  // Kept alive: the backend knows a prepared matrix by its host address.
  std::vector<std::vector<uint8_t>> kept;
  for (DType type : kAllTypes) {
    SCOPED_TRACE(dtype_info(type).name);
    const int64_t block = dtype_info(type).block_size;
    const int64_t cols = block == 1 ? 100 : (block == 32 ? 3 * 32 : 2 * 256);
    const int64_t rows = 37;
    const int n = 9;
    std::vector<uint8_t> bytes;
    for (int64_t r = 0; r < rows; ++r) {
      auto row = random_weights(type, cols, rng);
      bytes.insert(bytes.end(), row.begin(), row.end());
    }
    kept.push_back(std::move(bytes));
    const Matrix w{type, kept.back().data(), rows, cols};
    vulkan_->prepare_matrix(w);
    const auto x = random_floats(static_cast<int64_t>(n) * cols, rng);
    const auto gpu = matmul(*vulkan_, w, x, n);
    const auto cpu = matmul(*cpu_, w, x, n);
    std::vector<float> wr(static_cast<size_t>(cols));
    for (int t = 0; t < n; ++t) {
      const float* xt = x.data() + t * cols;
      const auto err = activation_error(type, xt, cols);
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(type, w.row(r), wr.data(), cols);
        double exact = 0, magnitude = 0, cpu_bound = 0;
        for (int64_t i = 0; i < cols; ++i) {
          exact += double(wr[i]) * xt[i];
          magnitude += std::fabs(double(wr[i]) * xt[i]);
          cpu_bound += std::fabs(double(wr[i])) * err[i];
        }
        const float g = gpu[t * rows + r], c = cpu[t * rows + r];
        ASSERT_NEAR(g, exact, 1e-5 * magnitude + 1e-6) << "token " << t << " row " << r;
        ASSERT_NEAR(g, c, cpu_bound + 2e-5 * magnitude + 1e-6) << "token " << t << " row " << r;
      }
    }
    // One token alone gives the bits it had inside the batch of nine.
    for (int t : {0, 4, 8}) {
      const std::vector<float> one(x.begin() + t * cols, x.begin() + (t + 1) * cols);
      const auto alone = matmul(*vulkan_, w, one, 1);
      ASSERT_EQ(0, std::memcmp(alone.data(), gpu.data() + t * rows, rows * sizeof(float))) << "token " << t;
    }
  }
}

TEST_F(VulkanOps, ElementwiseNormsAndBiasAgainstCpu) {
  std::mt19937 rng(11);
  const int n_tokens = 5, width = 203;
  const int64_t n = static_cast<int64_t>(n_tokens) * width;
  std::vector<float> a = random_floats(n, rng), b = random_floats(n, rng);
  for (float& v : a) v *= 3.0f;  // |x| up to ~10: exp, tanh and silu away from 0
  const std::vector<float> norm_w = random_floats(width, rng), bias = random_floats(width, rng);
  const Matrix norm_m{DType::F32, reinterpret_cast<const uint8_t*>(norm_w.data()), 1, width};
  const Matrix bias_m{DType::F32, reinterpret_cast<const uint8_t*>(bias.data()), 1, width};
  vulkan_->prepare_matrix(norm_m);
  vulkan_->prepare_matrix(bias_m);

  using Op = std::function<void(Backend&, DevicePtr, DevicePtr, DevicePtr)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"swiglu", [&](Backend& be, DevicePtr x, DevicePtr y, DevicePtr o) { be.swiglu(x, y, o, n); }},
      {"geglu", [&](Backend& be, DevicePtr x, DevicePtr y, DevicePtr o) { be.geglu(x, y, o, n); }},
      {"scale", [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) { be.copy(o, x, n * 4); be.scale(o, 0.37f, n); }},
      {"softcap", [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) { be.copy(o, x, n * 4); be.softcap(o, 5.0f, n); }},
      {"add", [&](Backend& be, DevicePtr x, DevicePtr y, DevicePtr o) { be.copy(o, x, n * 4); be.add(o, y, n); }},
      {"add_bias", [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) { be.copy(o, x, n * 4); be.add_bias(o, bias_m, n_tokens, width); }},
      {"rmsnorm", [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) { be.rmsnorm(x, norm_m, o, n_tokens, width, 1e-6f); }},
      {"rmsnorm in place", [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) { be.copy(o, x, n * 4); be.rmsnorm(o, norm_m, o, n_tokens, width, 1e-6f); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    std::vector<float> results[2];
    Backend* backends[2] = {vulkan_, cpu_};
    for (int i = 0; i < 2; ++i) {
      auto xa = put(*backends[i], a), xb = put(*backends[i], b);
      auto out = backends[i]->allocate(n * sizeof(float));
      op(*backends[i], DevicePtr{xa.get(), 0}, DevicePtr{xb.get(), 0}, DevicePtr{out.get(), 0});
      results[i] = get(*backends[i], out.get(), n);
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(results[0][i], results[1][i], 1e-5 * std::fabs(results[1][i]) + 1e-6) << i;
  }
}

TEST_F(VulkanOps, RopeAgainstCpu) {
  std::mt19937 rng(13);
  const int n_tokens = 6, n_heads = 3, head_dim = 40;
  std::vector<float> factors(16);
  for (float& f : factors) f = 1.0f + static_cast<float>(rng() % 7);
  const Matrix factors_m{DType::F32, reinterpret_cast<const uint8_t*>(factors.data()), 1, 16};
  vulkan_->prepare_matrix(factors_m);
  const std::vector<int32_t> seqs(n_tokens, 0), positions = {0, 1, 7, 100, 2047, 32767};
  const auto x = random_floats(n_tokens * n_heads * head_dim, rng);
  for (bool neox : {false, true})
    for (bool with_factors : {false, true}) {
      SCOPED_TRACE(testing::Message() << "neox " << neox << " factors " << with_factors);
      const RopeParams p{head_dim, 32, 10000.0f, 1.0f, neox, with_factors ? &factors_m : nullptr};
      std::vector<float> results[2];
      Backend* backends[2] = {vulkan_, cpu_};
      for (int i = 0; i < 2; ++i) {
        auto b = put(*backends[i], x);
        backends[i]->begin_step(seqs.data(), positions.data(), n_tokens);
        backends[i]->rope(DevicePtr{b.get(), 0}, n_tokens, n_heads, p);
        results[i] = get(*backends[i], b.get(), x.size());
        backends[i]->finish_step();
      }
      for (size_t i = 0; i < x.size(); ++i) {
        const size_t pair_base = i - i % head_dim;
        double magnitude = 0;  // the head's largest value bounds each pair
        for (int d = 0; d < head_dim; ++d) magnitude = std::max(magnitude, std::fabs(double(x[pair_base + d])));
        ASSERT_NEAR(results[0][i], results[1][i], 1e-6 * magnitude) << i;
      }
    }
}

TEST_F(VulkanOps, KvStoreAndAttentionAgainstCpuForEveryCacheType) {
  struct Case {
    DType k, v;
    int n_head, n_head_kv, head_dim, window;
  };
  const Case cases[] = {{DType::F32, DType::F32, 4, 2, 64, 0},  {DType::F16, DType::F16, 8, 2, 64, 0},
                        {DType::Q8_0, DType::Q8_0, 4, 4, 64, 0}, {DType::F16, DType::Q8_0, 6, 2, 32, 0},
                        {DType::F16, DType::F16, 2, 1, 256, 0},  {DType::F16, DType::F16, 4, 2, 64, 20}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << dtype_info(c.k).name << "/" << dtype_info(c.v).name << " heads " << c.n_head
                                    << "/" << c.n_head_kv << " dim " << c.head_dim << " window " << c.window);
    std::mt19937 rng(17 + c.head_dim);
    const int width = c.n_head_kv * c.head_dim, n_seq = 2;
    const int ring = c.window > 0 ? c.window + kMaxTokens : 0;  // as KvCache keeps a windowed layer
    const int n_pos = c.window > 0 ? ring : 150;
    // Fill sequence 1 up to `total` positions in steps of kMaxTokens, then
    // attend with a batch of queries at its last positions.
    const int total = 150;
    std::vector<float> k_all = random_floats(static_cast<int64_t>(total) * width, rng);
    std::vector<float> v_all = random_floats(static_cast<int64_t>(total) * width, rng);
    const int n_q = 7;
    const auto q = random_floats(static_cast<int64_t>(n_q) * c.n_head * c.head_dim, rng);
    std::vector<float> results[2];
    Backend* backends[2] = {vulkan_, cpu_};
    for (int i = 0; i < 2; ++i) {
      Backend& be = *backends[i];
      KvLayer kv;
      kv.k_type = c.k;
      kv.v_type = c.v;
      kv.width = width;
      kv.k_row_bytes = row_bytes(c.k, width);
      kv.v_row_bytes = row_bytes(c.v, width);
      kv.k_seq_stride = kv.k_row_bytes * n_pos;
      kv.v_seq_stride = kv.v_row_bytes * n_pos;
      kv.ring = ring;
      auto kb = be.allocate(kv.k_seq_stride * n_seq), vb = be.allocate(kv.v_seq_stride * n_seq);
      kv.k = DevicePtr{kb.get(), 0};
      kv.v = DevicePtr{vb.get(), 0};
      auto ks = be.allocate(kMaxTokens * width * 4), vs = be.allocate(kMaxTokens * width * 4);
      for (int p0 = 0; p0 < total; p0 += kMaxTokens) {
        const int m = std::min(kMaxTokens, total - p0);
        std::vector<int32_t> seqs(m, 1), pos(m);
        for (int j = 0; j < m; ++j) pos[j] = p0 + j;
        be.upload(DevicePtr{ks.get(), 0}, k_all.data() + static_cast<size_t>(p0) * width, m * width * 4);
        be.upload(DevicePtr{vs.get(), 0}, v_all.data() + static_cast<size_t>(p0) * width, m * width * 4);
        be.begin_step(seqs.data(), pos.data(), m);
        be.kv_store(kv, DevicePtr{ks.get(), 0}, DevicePtr{vs.get(), 0}, m);
        be.finish_step();
      }
      std::vector<int32_t> seqs(n_q, 1), pos(n_q);
      for (int j = 0; j < n_q; ++j) pos[j] = total - n_q + j;
      auto qb = put(be, q);
      auto ob = be.allocate(q.size() * 4);
      const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim)), c.window};
      be.begin_step(seqs.data(), pos.data(), n_q);
      be.attention(DevicePtr{qb.get(), 0}, kv, n_q, shape, DevicePtr{ob.get(), 0});
      results[i] = get(be, ob.get(), q.size());
      be.finish_step();
      if (i == 0) {
        // The last query alone: the bits it had in the batch.
        const int row = c.n_head * c.head_dim;
        std::vector<float> last(q.end() - row, q.end());
        auto lb = put(be, last);
        auto lo = be.allocate(row * 4);
        be.begin_step(seqs.data() + n_q - 1, pos.data() + n_q - 1, 1);
        be.attention(DevicePtr{lb.get(), 0}, kv, 1, shape, DevicePtr{lo.get(), 0});
        const auto alone = get(be, lo.get(), row);
        be.finish_step();
        ASSERT_EQ(0, std::memcmp(alone.data(), results[0].data() + (n_q - 1) * row, row * 4));
      }
    }
    double vmax = 0;
    for (float x : v_all) vmax = std::max(vmax, std::fabs(double(x)));
    for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(results[0][i], results[1][i], 1e-4 * vmax) << i;
  }
}

TEST_F(VulkanOps, GetRowsMatchesCpuExactly) {
  std::mt19937 rng(19);
  for (DType type : {DType::Q4_K, DType::Q8_0, DType::F16}) {
    const int64_t cols = 256, rows = 11;
    std::vector<uint8_t> bytes;
    for (int64_t r = 0; r < rows; ++r) {
      auto row = random_weights(type, cols, rng);
      bytes.insert(bytes.end(), row.begin(), row.end());
    }
    const Matrix w{type, bytes.data(), rows, cols};
    const std::vector<int32_t> ids = {3, 0, 10, 3};
    std::vector<float> results[2];
    Backend* backends[2] = {vulkan_, cpu_};
    for (int i = 0; i < 2; ++i) {
      auto out = backends[i]->allocate(ids.size() * cols * 4);
      backends[i]->get_rows(w, ids.data(), static_cast<int>(ids.size()), DevicePtr{out.get(), 0});
      results[i] = get(*backends[i], out.get(), ids.size() * cols);
    }
    EXPECT_EQ(results[0], results[1]);
  }
}

}  // namespace
}  // namespace shoal
