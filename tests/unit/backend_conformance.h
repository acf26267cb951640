#pragma once
// The backend conformance suite: every op of the Backend interface, written
// once and run for every backend this build has and this machine can make
// (the CPU always; Vulkan on its first device, lavapipe here; a CUDA backend
// adds one line to kBackends). Each op is checked against a host reference
// computed in double from the same inputs, for every weight type and KV
// cache type, on odd shapes and on sizes that cross each backend's internal
// limits: the 32 MiB Vulkan staging area, the 1024 dispatches one submission
// holds, the 65535 workgroups of one dispatch dimension, a 262k-row
// vocabulary, 300-token batches. And the determinism every backend promises
// (docs/design.md): a row's bits do not depend on what else is in its batch.
//
// Tolerances, and why (they are what a correct implementation differs by):
// - matmul: any summation order of f32 products of the exactly dequantized
//   weights errs by a few ulp of sum |w x|: 1e-5 of it. A backend that
//   multiplies by activations rounded to the weight type's partner (the
//   CPU: Q8_0, Q8_K, F16 or BF16, vec_dot.h) adds at most
//   sum |w_i| * (that rounding's bound on x_i).
// - element-wise ops and norms: exp, tanh and division err by a few ulp
//   (GLSL allows exp 3 + 2|x| ulp, Highway's Exp 1-2 ulp), and the
//   composite formulas add a few more: 1e-5 relative, with |x| < 10.
//   add, scale and copy are single IEEE operations: exact.
// - rope: the angle's cos and sin are computed in double then rounded to
//   float; the rotation's two products and sum (maybe fused) add a few ulp:
//   1e-6 of the head's largest value.
// - attention: the reference reads the cache bytes the backend wrote; exp's
//   few ulp and the sums over up to 1000 positions leave 1e-5 of max |v|.
// - get_rows and the KV rows a backend writes: exactly the host's bits
//   (an embedding or a cached row must not depend on the device).
//
// This header is the suite's shared part: the backends under test, the
// host references' helpers and the fixture. backend_conformance_test.cpp
// holds the required ops' tests, backend_optional_ops_test.cpp those of the
// ops only some architectures need (OptionalOp). Its helpers sit in an
// unnamed namespace: each of the two files has its own copy and its own
// backends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/forwarding_backend.h"
#include "backend/vulkan/vulkan_devices.h"
#ifndef SHOAL_NO_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif
#include "random_blocks.h"
#include "tensor/dequantize.h"
#include "tensor/quantize.h"
#include "tensor/vec_dot.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace shoal {
namespace {

constexpr int kMaxTokens = 320;
constexpr int64_t kMaxCols = 4096;

// A backend under test, made once per process and kept (a Vulkan device
// takes a moment to open).
struct BackendUnderTest {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Backend> backend;
  bool rounds_activations = false;  // matmul multiplies by activations rounded to the weight's partner type
  std::string missing;              // why it could not be made here
};

BackendUnderTest make_cpu() {
  BackendUnderTest b;
  b.pool = std::make_unique<ThreadPool>(2);
  b.backend = std::make_unique<CpuBackend>(*b.pool, kMaxTokens, kMaxCols);
  b.rounds_activations = true;
  return b;
}

BackendUnderTest make_vulkan() {
  BackendUnderTest b;
  std::string why;
  const auto devices = list_vulkan_devices(&why);
  if (devices.empty()) {
    b.missing = "no Vulkan device (" + why + "): scripts/setup installs mesa-vulkan-drivers, whose lavapipe is one";
    return b;
  }
  b.backend = make_vulkan_backend(default_vulkan_device(devices), kMaxTokens);
  std::printf("[ vulkan ] device: %s\n", b.backend->name().c_str());
  return b;
}

// The same device with prompts through matmul.comp's shared-memory TILED
// build, which a GPU takes and lavapipe (a CPU device) does not by itself.
BackendUnderTest make_vulkan_tiled() {
  setenv("SHOAL_VULKAN_TILED", "1", 1);
  BackendUnderTest b = make_vulkan();
  unsetenv("SHOAL_VULKAN_TILED");
  return b;
}

// A device that implements only Backend's required virtuals (the CPU's):
// every default (backend.h; docs/architecture.md, "Adding a device") then
// runs through this suite as a new device's would.
class RequiredOnly : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void copy_rows(DevicePtr dst, int64_t dst_stride, DevicePtr src, int64_t src_stride, int64_t width,
                 int64_t n_rows) override {
    Backend::copy_rows(dst, dst_stride, src, src_stride, width, n_rows);
  }
  void matmuls(std::span<const MatmulOutput> outputs, DevicePtr x, int n_tokens) override {
    Backend::matmuls(outputs, x, n_tokens);
  }
  void run_routed_experts(const HostRoutes& routes, const std::function<void(int)>& run, DevicePtr out,
                          float* host) override {
    Backend::run_routed_experts(routes, run, out, host);
  }
  bool routes_experts() const override { return Backend::routes_experts(); }
  bool runs(OptionalOp op) const override { return Backend::runs(op); }
  void delta_net(DevicePtr qkv, DevicePtr alpha, DevicePtr beta, const RecurrentLayer& state, const DeltaNetParams& p,
                 int n_tokens, DevicePtr out) override {
    Backend::delta_net(qkv, alpha, beta, state, p, n_tokens, out);
  }
  void sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) override { Backend::sigmoid_mul(x, gate, n); }
  void split_halves(DevicePtr src, int64_t n_rows, int half, DevicePtr a, DevicePtr b) override {
    Backend::split_halves(src, n_rows, half, a, b);
  }
  void swiglu_oai(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override {
    Backend::swiglu_oai(gate, up, out, n);
  }
};

BackendUnderTest make_required_only() {
  BackendUnderTest b = make_cpu();
  b.backend = std::make_unique<RequiredOnly>(std::move(b.backend));
  return b;
}

const std::map<std::string, std::function<BackendUnderTest()>> kBackends = {
    {"cpu", make_cpu}, {"vulkan", make_vulkan}, {"vulkan_tiled", make_vulkan_tiled},
    {"required_only", make_required_only}};

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Weight bytes kept for the whole process: a backend knows a prepared
// matrix by its host address (as the engine's mapped file keeps it), so
// none may be freed and reused while the shared backends live.
const uint8_t* hold(std::vector<uint8_t> bytes) {
  static std::vector<std::unique_ptr<std::vector<uint8_t>>> held;
  held.push_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes)));
  return held.back()->data();
}
Matrix held_f32(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return Matrix{DType::F32, hold(std::move(bytes)), 1, static_cast<int64_t>(values.size())};
}

// A weight matrix of random rows; `blocks` are the original bytes (a
// backend may point `m` at its own regrouped copy).
struct RandomMatrix {
  const uint8_t* blocks = nullptr;
  Matrix m;
  RandomMatrix(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::vector<uint8_t> bytes;
    for (int64_t r = 0; r < rows; ++r) {
      auto row = random_weights(type, cols, rng);
      bytes.insert(bytes.end(), row.begin(), row.end());
    }
    blocks = hold(std::move(bytes));
    m = Matrix{type, blocks, rows, cols};
  }
  std::vector<float> row(int64_t r) const {
    std::vector<float> out(static_cast<size_t>(m.cols));
    dequantize_row(m.type, blocks + r * row_bytes(m.type, m.cols), out.data(), m.cols);
    return out;
  }
};

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

class BackendConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    static std::map<std::string, BackendUnderTest> made;
    auto it = made.find(GetParam());
    if (it == made.end()) it = made.emplace(GetParam(), kBackends.at(GetParam())()).first;
    under_test_ = &it->second;
    if (!under_test_->backend) {
      // scripts/test installs lavapipe, so there a missing device fails.
      if (std::getenv("SHOAL_REQUIRE_MODELS")) FAIL() << under_test_->missing;
      GTEST_SKIP() << under_test_->missing;
    }
  }
  Backend& be() { return *under_test_->backend; }

  void prepare(Matrix& m, bool rows_only = false) {
    const WeightToPrepare w{&m, 0, rows_only};
    be().prepare_weights(std::span<const WeightToPrepare>(&w, 1), keep_);
  }
  std::unique_ptr<Buffer> put(const std::vector<float>& values) {
    auto b = be().allocate(values.size() * sizeof(float));
    be().upload(DevicePtr{b.get(), 0}, values.data(), values.size() * sizeof(float));
    return b;
  }
  std::vector<float> get(Buffer* b, size_t n, size_t offset = 0) {
    std::vector<float> out(n);
    be().download(out.data(), DevicePtr{b, offset}, n * sizeof(float));
    return out;
  }
  std::vector<float> matmul(const Matrix& w, const std::vector<float>& x, int n) {
    auto xb = put(x);
    auto yb = be().allocate(static_cast<size_t>(n) * w.rows * sizeof(float));
    be().matmul(w, DevicePtr{xb.get(), 0}, DevicePtr{yb.get(), 0}, n);
    return get(yb.get(), static_cast<size_t>(n) * w.rows);
  }
  // y against the double reference of W x, for rows first, first + step, ...
  void expect_matmul_near(const RandomMatrix& w, const std::vector<float>& x, int n, const std::vector<float>& y,
                          int64_t row_step = 1, int64_t first_row = 0) {
    const int64_t cols = w.m.cols, rows = w.m.rows;
    std::vector<std::vector<double>> err;  // per token: how far its rounded activations may be
    for (int t = 0; t < n; ++t)
      err.push_back(under_test_->rounds_activations ? activation_error(w.m.type, x.data() + t * cols, cols)
                                                    : std::vector<double>(static_cast<size_t>(cols), 0.0));
    for (int64_t r = first_row; r < rows; r += row_step) {
      const auto wr = w.row(r);
      for (int t = 0; t < n; ++t) {
        const float* xt = x.data() + t * cols;
        double exact = 0, magnitude = 0, rounding = 0;
        for (int64_t i = 0; i < cols; ++i) {
          exact += double(wr[i]) * xt[i];
          magnitude += std::fabs(double(wr[i]) * xt[i]);
          rounding += std::fabs(double(wr[i])) * err[t][i];
        }
        ASSERT_NEAR(y[t * rows + r], exact, rounding + 1e-5 * magnitude + 1e-6) << "token " << t << " row " << r;
      }
    }
  }
  // Each listed token alone gives the bits it had in the batch of n.
  void expect_tokens_alone_same_bits(const Matrix& w, const std::vector<float>& x, const std::vector<float>& y,
                                     std::initializer_list<int> tokens) {
    for (int t : tokens) {
      const std::vector<float> one(x.begin() + t * w.cols, x.begin() + (t + 1) * w.cols);
      const auto alone = matmul(w, one, 1);
      ASSERT_EQ(0, std::memcmp(alone.data(), y.data() + t * w.rows, w.rows * sizeof(float))) << "token " << t;
    }
  }

  BackendUnderTest* under_test_ = nullptr;
  PreparedMemory keep_;
};

}  // namespace
}  // namespace shoal
