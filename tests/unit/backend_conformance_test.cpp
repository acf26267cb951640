// The backend conformance suite, the required ops (backend_conformance.h
// says what the suite checks and why its tolerances are what they are).
#include "backend_conformance.h"

namespace shoal {
namespace {


TEST_P(BackendConformance, MatmulEveryTypeOddShapes) {
  std::mt19937 rng(7);
  for (DType type : kAllTypes) {
    const int64_t block = dtype_info(type).block_size;
    for (int64_t rows : {1, 37}) {
      const int64_t cols = block == 1 ? 100 : (block == 32 ? 3 * 32 : 2 * 256);
      SCOPED_TRACE(testing::Message() << dtype_info(type).name << " " << rows << "x" << cols);
      RandomMatrix w(type, rows, cols, rng);
      prepare(w.m);
      const int n = 9;  // one more than a tile of eight
      const auto x = random_floats(static_cast<int64_t>(n) * cols, rng);
      const auto y = matmul(w.m, x, n);
      expect_matmul_near(w, x, n, y);
      expect_tokens_alone_same_bits(w.m, x, y, {0, 4, 8});
    }
  }
}

// Past every tile's edge: rows beyond a workgroup of 64 and of 128, tokens
// beyond the tiles of 8 and 32, a float row's short last chunk; each token
// alone (the one-token kernel) gives the bits it had in the batch.
TEST_P(BackendConformance, MatmulPastEveryTileEdge) {
  std::mt19937 rng(11);
  for (DType type : {DType::F32, DType::Q8_0, DType::Q4_K}) {
    const int64_t rows = 129, cols = type == DType::F32 ? 100 : type == DType::Q8_0 ? 96 : 512;
    SCOPED_TRACE(dtype_info(type).name);
    RandomMatrix w(type, rows, cols, rng);
    prepare(w.m);
    const int n = 70;
    const auto x = random_floats(static_cast<int64_t>(n) * cols, rng);
    const auto y = matmul(w.m, x, n);
    expect_matmul_near(w, x, n, y);
    expect_tokens_alone_same_bits(w.m, x, y, {0, 7, 8, 31, 32, 63, 64, 69});
  }
}

// A mixture on the device (Backend::routes_experts): the router picks each
// token's top k by logit, ties to the lower id, weighted by a softmax over
// the chosen; each route slot is its expert's matmul of its token's row,
// bit for bit; the weighted sum adds a token's slots in rank order.
TEST_P(BackendConformance, RoutedExpertsAreEachExpertsMatmul) {
  if (!be().routes_experts()) GTEST_SKIP() << "this backend routes experts on the host (model/feed_forward.cpp)";
  std::mt19937 rng(9);
  const int n_expert = 4, k = 2, n = 5;
  const int64_t rows = 40;
  for (DType type : {DType::Q8_0, DType::Q4_K, DType::F32}) {
    SCOPED_TRACE(dtype_info(type).name);
    const int64_t cols = dtype_info(type).block_size == 256 ? 256 : 64;
    RandomMatrix stacked(type, n_expert * rows, cols, rng);
    const WeightToPrepare prep{&stacked.m, rows, false, true};
    be().prepare_weights(std::span<const WeightToPrepare>(&prep, 1), keep_);
    auto logits = random_floats(n * n_expert, rng);
    logits[1 * n_expert + 2] = logits[1 * n_expert + 3] = 10.0f;  // a tie: expert 2 first
    const auto x = random_floats(n * cols, rng);
    auto logits_b = put(logits), xb = put(x);
    auto experts_b = be().allocate(n * k * sizeof(int32_t)), weights_b = be().allocate(n * k * sizeof(float));
    auto yb = be().allocate(n * k * rows * sizeof(float)), sum_b = be().allocate(n * rows * sizeof(float));
    const DevicePtr experts{experts_b.get(), 0}, weights{weights_b.get(), 0}, y{yb.get(), 0};
    be().route_experts(DevicePtr{logits_b.get(), 0}, n, n_expert, k, 1.0f, experts, weights);
    be().matmul_routed(stacked.m, rows, DevicePtr{xb.get(), 0}, k, experts, y, n * k);
    be().weighted_sum(y, weights, n, k, static_cast<int>(rows), DevicePtr{sum_b.get(), 0});
    std::vector<int32_t> chosen(n * k);
    be().download(chosen.data(), experts, chosen.size() * sizeof(int32_t));
    const auto w = get(weights_b.get(), n * k);
    const auto slots = get(yb.get(), n * k * rows);
    const auto sums = get(sum_b.get(), n * rows);
    for (int t = 0; t < n; ++t) {
      std::vector<int> order(n_expert);
      std::iota(order.begin(), order.end(), 0);
      const float* l = logits.data() + t * n_expert;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
      double total = 0;
      for (int j = 0; j < k; ++j) total += std::exp(double(l[order[j]]) - l[order[0]]);
      for (int j = 0; j < k; ++j) {
        const int s = t * k + j;
        ASSERT_EQ(chosen[s], order[j]) << "token " << t << " rank " << j;
        EXPECT_NEAR(w[s], std::exp(double(l[order[j]]) - l[order[0]]) / total, 1e-6);
        const Matrix expert = Matrix{type, stacked.m.data + chosen[s] * rows * stacked.m.row_stride(), rows, cols};
        const std::vector<float> row(x.begin() + t * cols, x.begin() + (t + 1) * cols);
        const auto alone = matmul(expert, row, 1);
        ASSERT_EQ(0, std::memcmp(alone.data(), slots.data() + s * rows, rows * sizeof(float))) << "slot " << s;
      }
      for (int64_t r = 0; r < rows; ++r) {
        double expect = 0;
        for (int j = 0; j < k; ++j) expect += double(w[t * k + j]) * slots[(t * k + j) * rows + r];
        EXPECT_NEAR(sums[t * rows + r], expect, 1e-5 * (std::fabs(expect) + 1));
      }
    }
  }
}

TEST_P(BackendConformance, MatmulsGiveEachMatmulsBits) {
  std::mt19937 rng(8);
  for (DType type : {DType::Q4_K, DType::Q8_0, DType::F16}) {
    SCOPED_TRACE(dtype_info(type).name);
    RandomMatrix a(type, 24, 512, rng), b(type, 8, 512, rng), c(type, 13, 512, rng);
    for (RandomMatrix* m : {&a, &b, &c}) prepare(m->m);
    const int n = 5;
    const auto x = random_floats(n * 512, rng);
    auto xb = put(x);
    std::vector<std::unique_ptr<Buffer>> ys;
    std::vector<Backend::MatmulOutput> outs;
    for (RandomMatrix* m : {&a, &b, &c}) {
      ys.push_back(be().allocate(n * m->m.rows * sizeof(float)));
      outs.push_back({&m->m, DevicePtr{ys.back().get(), 0}});
    }
    be().matmuls(outs, DevicePtr{xb.get(), 0}, n);
    int i = 0;
    for (RandomMatrix* m : {&a, &b, &c}) {
      const auto together = get(ys[i++].get(), n * m->m.rows);
      EXPECT_EQ(together, matmul(m->m, x, n));
    }
  }
}

TEST_P(BackendConformance, VocabularySizedMatmulCrossesDispatchAndStagingLimits) {
  // 262,150 rows: more row groups of four than one dispatch dimension takes
  // (65535), and an F16 matrix of 33.6 MB, more than one staging area.
  std::mt19937 rng(9);
  RandomMatrix w(DType::F16, 262150, 64, rng);
  prepare(w.m);
  const int n = 3;
  const auto x = random_floats(n * 64, rng);
  const auto y = matmul(w.m, x, n);
  expect_matmul_near(w, x, n, y, 97);               // every 97th row
  expect_matmul_near(w, x, n, y, 1, w.m.rows - 8);     // and the last ones, in the last z slice
}

TEST_P(BackendConformance, ManyTokenBatchMatchesEachTokenAlone) {
  std::mt19937 rng(10);
  for (DType type : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::F32}) {
    SCOPED_TRACE(dtype_info(type).name);
    RandomMatrix w(type, 50, 256, rng);
    prepare(w.m);
    const int n = 300;
    const auto x = random_floats(static_cast<int64_t>(n) * 256, rng);
    const auto y = matmul(w.m, x, n);
    expect_matmul_near(w, x, n, y, 7);
    expect_tokens_alone_same_bits(w.m, x, y, {0, 7, 8, 150, 299});
  }
}

// Element-wise ops against double references.
TEST_P(BackendConformance, ElementwiseNormsAndBias) {
  std::mt19937 rng(11);
  const int n_tokens = 5, width = 203;
  const int64_t n = static_cast<int64_t>(n_tokens) * width;
  std::vector<float> a = random_floats(n, rng), b = random_floats(n, rng);
  for (float& v : a) v *= 3.0f;  // |x| up to ~10: exp, tanh and silu away from 0
  std::vector<float> norm_w = random_floats(width, rng), bias = random_floats(width, rng);
  Matrix norm_m = held_f32(norm_w), bias_m = held_f32(bias);
  prepare(norm_m);
  prepare(bias_m);
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * x * (1 + 0.044715 * x * x))); };
  auto rms_of = [&](int64_t i) {
    const int64_t row = i / width * width;
    double ss = 0;
    for (int k = 0; k < width; ++k) ss += double(a[row + k]) * a[row + k];
    return 1.0 / std::sqrt(ss / width + 1e-6);
  };
  struct Op {
    const char* name;
    std::function<void(Backend&, DevicePtr, DevicePtr, DevicePtr)> run;
    std::function<double(int64_t)> reference;
    bool exact;
  };
  const std::vector<Op> ops = {
      {"swiglu", [&](Backend& be, DevicePtr x, DevicePtr y, DevicePtr o) { be.swiglu(x, y, o, n); },
       [&](int64_t i) { return silu(a[i]) * b[i]; }, false},
      {"geglu", [&](Backend& be, DevicePtr x, DevicePtr y, DevicePtr o) { be.geglu(x, y, o, n); },
       [&](int64_t i) { return gelu(a[i]) * b[i]; }, false},
      {"scale", [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) { be.copy(o, x, n * 4); be.scale(o, 0.37f, n); },
       [&](int64_t i) { return double(a[i] * 0.37f); }, true},
      {"softcap",
       [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) { be.copy(o, x, n * 4); be.softcap(o, 5.0f, n); },
       [&](int64_t i) { return 5.0 * std::tanh(a[i] / 5.0); }, false},
      {"add", [&](Backend& be, DevicePtr x, DevicePtr y, DevicePtr o) { be.copy(o, x, n * 4); be.add(o, y, n); },
       [&](int64_t i) { return double(a[i] + b[i]); }, true},
      {"add_bias",
       [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) {
         be.copy(o, x, n * 4);
         be.add_bias(o, bias_m, n_tokens, width);
       },
       [&](int64_t i) { return double(a[i] + bias[i % width]); }, true},
      {"rmsnorm",
       [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) { be.rmsnorm(x, norm_m, o, n_tokens, width, 1e-6f); },
       [&](int64_t i) { return a[i] * rms_of(i) * norm_w[i % width]; }, false},
      {"rmsnorm in place",
       [&](Backend& be, DevicePtr x, DevicePtr, DevicePtr o) {
         be.copy(o, x, n * 4);
         be.rmsnorm(o, norm_m, o, n_tokens, width, 1e-6f);
       },
       [&](int64_t i) { return a[i] * rms_of(i) * norm_w[i % width]; }, false},
  };
  for (const Op& op : ops) {
    SCOPED_TRACE(op.name);
    auto xa = put(a), xb = put(b);
    auto out = be().allocate(n * sizeof(float));
    op.run(be(), DevicePtr{xa.get(), 0}, DevicePtr{xb.get(), 0}, DevicePtr{out.get(), 0});
    const auto got = get(out.get(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = op.reference(i);
      if (op.exact) ASSERT_EQ(got[i], static_cast<float>(want)) << i;
      else ASSERT_NEAR(got[i], want, 1e-5 * std::fabs(want) + 1e-6) << i;
    }
  }
}

TEST_P(BackendConformance, ElementwiseBeyondOneDispatchRow) {
  // More values than 65535 workgroups of 256 threads cover in one row.
  const int64_t n = 65535ll * 256 + 1000;
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.5f;
    b[i] = static_cast<float>(i / 1000);
  }
  auto xa = put(a), xb = put(b);
  be().add(DevicePtr{xa.get(), 0}, DevicePtr{xb.get(), 0}, n);
  be().scale(DevicePtr{xa.get(), 0}, 0.25f, n);
  const auto got = get(xa.get(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], (a[i] + b[i]) * 0.25f) << i;
}

TEST_P(BackendConformance, RmsnormOverMoreRowsThanOneDispatchDimension) {
  std::mt19937 rng(12);
  const int rows = 70000, width = 16;
  const auto x = random_floats(static_cast<int64_t>(rows) * width, rng);
  std::vector<float> ones(width, 1.0f);
  Matrix w = held_f32(ones);
  prepare(w);
  auto xb = put(x);
  auto yb = be().allocate(x.size() * sizeof(float));
  be().rmsnorm(DevicePtr{xb.get(), 0}, w, DevicePtr{yb.get(), 0}, rows, width, 1e-5f);
  const auto y = get(yb.get(), x.size());
  for (int r = 0; r < rows; r += 1 + (r < 65530 ? 499 : 0)) {
    double ss = 0;
    for (int k = 0; k < width; ++k) ss += double(x[r * width + k]) * x[r * width + k];
    const double inv = 1.0 / std::sqrt(ss / width + 1e-5);
    for (int k = 0; k < width; ++k) ASSERT_NEAR(y[r * width + k], x[r * width + k] * inv, 1e-5 * std::fabs(x[r * width + k] * inv) + 1e-6) << r;
  }
}

TEST_P(BackendConformance, Rope) {
  std::mt19937 rng(13);
  const int n_tokens = 6, n_heads = 3, head_dim = 40, rope_dim = 32;
  std::vector<float> factors(16);
  for (float& f : factors) f = 1.0f + static_cast<float>(rng() % 7);
  Matrix factors_m = held_f32(factors);
  prepare(factors_m);
  const std::vector<int32_t> seqs(n_tokens, 0), positions = {0, 1, 7, 100, 2047, 32767};
  const auto x = random_floats(n_tokens * n_heads * head_dim, rng);
  // offset: the rotating dims start 8 into each head (latent attention's trail the unrotated part).
  for (bool neox : {false, true})
    for (bool with_factors : {false, true})
      for (float freq_scale : {1.0f, 0.25f})
        for (int offset : {0, 8}) {
        if (offset != 0 && !be().runs(OptionalOp::LatentAttention)) continue;
        SCOPED_TRACE(testing::Message() << "neox " << neox << " factors " << with_factors << " scale " << freq_scale
                                        << " offset " << offset);
        const RopeParams p{head_dim, rope_dim, 10000.0f, freq_scale, neox, with_factors ? &factors_m : nullptr,
                           RopeYarn{}, offset};
        auto b = put(x);
        be().begin_step(seqs.data(), positions.data(), n_tokens);
        be().rope(DevicePtr{b.get(), 0}, n_tokens, n_heads, p);
        const auto got = get(b.get(), x.size());
        be().finish_step();
        for (int t = 0; t < n_tokens; ++t)
          for (int h = 0; h < n_heads; ++h) {
            const float* in = x.data() + (t * n_heads + h) * head_dim;
            const float* out = got.data() + (t * n_heads + h) * head_dim;
            double magnitude = 0;
            for (int d = 0; d < head_dim; ++d) magnitude = std::max(magnitude, std::fabs(double(in[d])));
            std::vector<double> want(in, in + head_dim);
            for (int i = 0; i < rope_dim / 2; ++i) {
              double theta = positions[t] * double(freq_scale) * std::pow(10000.0, -2.0 * i / rope_dim);
              if (with_factors) theta /= factors[i];
              // cos and sin rounded to float, as a backend's tables hold them
              const double c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
              const int i0 = offset + (neox ? i : 2 * i), i1 = offset + (neox ? i + rope_dim / 2 : 2 * i + 1);
              want[i0] = in[i0] * c - in[i1] * s;
              want[i1] = in[i0] * s + in[i1] * c;
            }
            for (int d = 0; d < head_dim; ++d) ASSERT_NEAR(out[d], want[d], 1e-6 * magnitude) << t << " " << h << " " << d;
          }
      }
}

// The host's bytes for one cached row.
std::vector<uint8_t> host_kv_row(DType type, const float* src, int n) {
  std::vector<uint8_t> out(row_bytes(type, n));
  if (type == DType::F32) {
    std::memcpy(out.data(), src, out.size());
  } else if (type == DType::F16) {
    for (int i = 0; i < n; ++i) {
      const uint16_t h = f32_to_f16(src[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else {
    quantize_row_reference(type, src, out.data(), n);
  }
  return out;
}

TEST_P(BackendConformance, KvStoreAndAttentionEveryCacheType) {
  struct Case {
    DType k, v;
    int n_head, n_head_kv, head_dim, window, total, n_q;
    bool sinks = false;  // gpt-oss: a logit per head in the softmax's denominator
  };
  const Case cases[] = {{DType::F32, DType::F32, 4, 2, 64, 0, 150, 7},   {DType::F16, DType::F16, 8, 2, 64, 0, 150, 7},
                        {DType::Q8_0, DType::Q8_0, 4, 4, 64, 0, 150, 7}, {DType::F16, DType::Q8_0, 6, 2, 32, 0, 150, 7},
                        {DType::F16, DType::F16, 2, 1, 256, 0, 150, 7},  {DType::F16, DType::F16, 4, 2, 64, 20, 150, 7},
                        {DType::F16, DType::F16, 4, 1, 128, 0, 1000, 40}, {DType::F32, DType::F32, 8, 2, 64, 0, 150, 7, true},
                        {DType::F16, DType::F16, 4, 2, 64, 20, 150, 7, true},
                        // q8_0 rows of an odd number of 34-byte blocks (a tensor-group member's one KV head of 32)
                        {DType::Q8_0, DType::Q8_0, 2, 1, 32, 0, 150, 7}, {DType::Q8_0, DType::F16, 6, 3, 32, 0, 150, 7},
                        // Past several splits of 512 positions (a device may run each on its own workgroups
                        // for a few queries, as for the last one alone below): with sinks, and a window of 700.
                        {DType::F16, DType::F16, 4, 2, 64, 0, 1300, 9, true}, {DType::F16, DType::Q8_0, 4, 2, 64, 700, 1500, 9}};
  for (const Case& c : cases) {
    if (c.sinks && !be().runs(OptionalOp::AttentionSinks)) continue;
    SCOPED_TRACE(testing::Message() << dtype_info(c.k).name << "/" << dtype_info(c.v).name << " heads " << c.n_head
                                    << "/" << c.n_head_kv << " dim " << c.head_dim << " window " << c.window
                                    << " positions " << c.total << (c.sinks ? " sinks" : ""));
    std::mt19937 rng(17 + c.head_dim + c.total);
    const int width = c.n_head_kv * c.head_dim, n_seq = 2, step = 64;
    const int ring = c.window > 0 ? c.window + step : 0;  // as KvCache keeps a windowed layer
    const int n_pos = c.window > 0 ? ring : c.total;
    const std::vector<float> k_all = random_floats(static_cast<int64_t>(c.total) * width, rng);
    const std::vector<float> v_all = random_floats(static_cast<int64_t>(c.total) * width, rng);
    const auto q = random_floats(static_cast<int64_t>(c.n_q) * c.n_head * c.head_dim, rng);
    KvLayer kv;
    kv.k_type = c.k;
    kv.v_type = c.v;
    kv.width = width;
    // Rows as the backend spaces them (Backend::kv_row_stride: Vulkan pads a q8_0 row to whole words).
    kv.k_row_bytes = be().kv_row_stride(row_bytes(c.k, width));
    kv.v_row_bytes = be().kv_row_stride(row_bytes(c.v, width));
    kv.k_seq_stride = kv.k_row_bytes * n_pos;
    kv.v_seq_stride = kv.v_row_bytes * n_pos;
    kv.ring = ring;
    auto kb = be().allocate(kv.k_seq_stride * n_seq), vb = be().allocate(kv.v_seq_stride * n_seq);
    kv.k = DevicePtr{kb.get(), 0};
    kv.v = DevicePtr{vb.get(), 0};
    // Sequence 1 filled in steps of 64 positions.
    auto ks = be().allocate(step * width * 4), vs = be().allocate(step * width * 4);
    for (int p0 = 0; p0 < c.total; p0 += step) {
      const int m = std::min(step, c.total - p0);
      std::vector<int32_t> seqs(m, 1), pos(m);
      for (int j = 0; j < m; ++j) pos[j] = p0 + j;
      be().upload(DevicePtr{ks.get(), 0}, k_all.data() + static_cast<size_t>(p0) * width, m * width * 4);
      be().upload(DevicePtr{vs.get(), 0}, v_all.data() + static_cast<size_t>(p0) * width, m * width * 4);
      be().begin_step(seqs.data(), pos.data(), m);
      be().kv_store(kv, DevicePtr{ks.get(), 0}, DevicePtr{vs.get(), 0}, m);
      be().finish_step();
    }
    // The cached rows are the host's encoding, bit for bit; the reference
    // attends over what they decode to.
    std::vector<uint8_t> k_bytes(kv.k_seq_stride), v_bytes(kv.v_seq_stride);
    be().download(k_bytes.data(), kv.k.bytes(kv.k_seq_stride), k_bytes.size());
    be().download(v_bytes.data(), kv.v.bytes(kv.v_seq_stride), v_bytes.size());
    const KvView<const uint8_t*> host = kv.with<const uint8_t*>(k_bytes.data() - kv.k_seq_stride,
                                                               v_bytes.data() - kv.v_seq_stride);
    const int first_kept = c.window > 0 ? c.total - ring : 0;
    for (int pos = first_kept; pos < c.total; ++pos) {
      ASSERT_EQ(host_kv_row(c.k, k_all.data() + pos * width, width),
                std::vector<uint8_t>(host.k_row(1, pos), host.k_row(1, pos) + row_bytes(c.k, width))) << "K at " << pos;
      ASSERT_EQ(host_kv_row(c.v, v_all.data() + pos * width, width),
                std::vector<uint8_t>(host.v_row(1, pos), host.v_row(1, pos) + row_bytes(c.v, width))) << "V at " << pos;
    }

    std::vector<int32_t> seqs(c.n_q, 1), pos(c.n_q);
    for (int j = 0; j < c.n_q; ++j) pos[j] = c.total - c.n_q + j;
    auto qb = put(q);
    auto ob = be().allocate(q.size() * 4);
    std::vector<float> sink_logits = random_floats(c.n_head, rng);
    for (float& x : sink_logits) x = 0.5f + 1.5f * x;  // -1 to 2: as large as the scores, and larger
    Matrix sinks = held_f32(sink_logits);
    if (c.sinks) prepare(sinks, true);
    const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(float(c.head_dim)), c.window,
                               c.sinks ? &sinks : nullptr};
    be().begin_step(seqs.data(), pos.data(), c.n_q);
    be().attention(DevicePtr{qb.get(), 0}, kv, c.n_q, shape, DevicePtr{ob.get(), 0});
    const auto got = get(ob.get(), q.size());
    be().finish_step();

    double vmax = 0;
    for (float x : v_all) vmax = std::max(vmax, std::fabs(double(x)));
    std::vector<float> kr(width), vr(width);
    for (int t = 0; t < c.n_q; ++t)
      for (int h = 0; h < c.n_head; ++h) {
        const int g = h / (c.n_head / c.n_head_kv);
        // A Q8_0 K cache is read by a dot product with q rounded to Q8_0
        // (ggml's pairing, on every backend): the reference rounds it too.
        std::vector<float> qh(q.begin() + (t * c.n_head + h) * c.head_dim,
                              q.begin() + (t * c.n_head + h + 1) * c.head_dim);
        if (c.k == DType::Q8_0) {
          std::vector<uint8_t> blocks(row_bytes(DType::Q8_0, c.head_dim));
          quantize_row_reference(DType::Q8_0, qh.data(), blocks.data(), c.head_dim);
          dequantize_row(DType::Q8_0, blocks.data(), qh.data(), c.head_dim);
        }
        const int lo = c.window > 0 ? std::max(0, pos[t] - c.window + 1) : 0;
        std::vector<double> score;
        double top = -1e300;
        for (int p = lo; p <= pos[t]; ++p) {
          dequantize_row(c.k, host.k_row(1, p), kr.data(), width);
          double s = 0;
          for (int d = 0; d < c.head_dim; ++d) s += double(qh[d]) * kr[g * c.head_dim + d];
          score.push_back(s * shape.scale);
          top = std::max(top, score.back());
        }
        std::vector<double> out(c.head_dim, 0.0);
        double total = c.sinks ? std::exp(sink_logits[h] - top) : 0.0;
        for (int p = lo; p <= pos[t]; ++p) {
          const double e = std::exp(score[p - lo] - top);
          total += e;
          dequantize_row(c.v, host.v_row(1, p), vr.data(), width);
          for (int d = 0; d < c.head_dim; ++d) out[d] += e * vr[g * c.head_dim + d];
        }
        for (int d = 0; d < c.head_dim; ++d)
          ASSERT_NEAR(got[(t * c.n_head + h) * c.head_dim + d], out[d] / total, 1e-5 * vmax)
              << "query " << t << " head " << h << " dim " << d;
      }

    // The last query alone: the bits it had in the batch.
    const int row = c.n_head * c.head_dim;
    const std::vector<float> last(q.end() - row, q.end());
    auto lb = put(last);
    auto lo = be().allocate(row * 4);
    be().begin_step(seqs.data() + c.n_q - 1, pos.data() + c.n_q - 1, 1);
    be().attention(DevicePtr{lb.get(), 0}, kv, 1, shape, DevicePtr{lo.get(), 0});
    const auto alone = get(lo.get(), row);
    be().finish_step();
    ASSERT_EQ(0, std::memcmp(alone.data(), got.data() + (c.n_q - 1) * row, row * 4));
  }
}

TEST_P(BackendConformance, GetRowsEveryTypeGivesTheHostsBits) {
  std::mt19937 rng(19);
  for (DType type : kAllTypes) {
    for (bool rows_only : {false, true}) {
      SCOPED_TRACE(testing::Message() << dtype_info(type).name << (rows_only ? " (only looked up)" : " (also multiplied)"));
      const int64_t cols = dtype_info(type).block_size == 1 ? 70 : 512;
      RandomMatrix w(type, 11, cols, rng);
      prepare(w.m, rows_only);
      const std::vector<int32_t> ids = {3, 0, 10, 3};
      auto out = be().allocate(ids.size() * cols * 4);
      be().get_rows(w.m, ids.data(), static_cast<int>(ids.size()), DevicePtr{out.get(), 0});
      const auto got = get(out.get(), ids.size() * cols);
      for (size_t t = 0; t < ids.size(); ++t) {
        const auto want = w.row(ids[t]);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data() + t * cols, cols * sizeof(float))) << "id " << ids[t];
      }
    }
  }
}

TEST_P(BackendConformance, GetRowsRefusesAnIdOutsideTheMatrix) {
  std::mt19937 rng(20);
  RandomMatrix w(DType::Q8_0, 11, 64, rng);
  prepare(w.m, true);
  auto out = be().allocate(64 * 4);
  for (int32_t id : {11, -1}) EXPECT_THROW(be().get_rows(w.m, &id, 1, DevicePtr{out.get(), 0}), Error) << id;
}

TEST_P(BackendConformance, StepLongerThanOneSubmission) {
  // 1500 dispatches and 48 MiB of uploads in one step: more than a
  // submission's descriptor sets and more than the staging area.
  const int64_t n = 4096;
  std::vector<float> x(n), y0(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = 0.001f * static_cast<float>(i % 97);
    y0[i] = static_cast<float>(i);
  }
  auto xb = put(x), yb = put(y0);
  const size_t big = 12u << 20;  // floats
  std::vector<float> big_values(big);
  for (size_t i = 0; i < big; ++i) big_values[i] = static_cast<float>(i % 4093);
  auto bb = be().allocate(big * sizeof(float));
  const int32_t seq = 0, pos = 0;
  be().begin_step(&seq, &pos, 1);
  for (int i = 0; i < 1500; ++i) {
    be().add(DevicePtr{yb.get(), 0}, DevicePtr{xb.get(), 0}, n);
    if (i == 700) be().upload(DevicePtr{bb.get(), 0}, big_values.data(), big * sizeof(float));
  }
  be().add(DevicePtr{yb.get(), 0}, DevicePtr{bb.get(), (big - n) * sizeof(float)}, n);
  const auto got = get(yb.get(), n);
  be().finish_step();
  for (int64_t i = 0; i < n; ++i) {
    float want = y0[i];
    for (int k = 0; k < 1500; ++k) want += x[i];
    want += big_values[big - n + i];
    ASSERT_EQ(got[i], want) << i;
  }
}

TEST_P(BackendConformance, UploadCopyDownloadBeyondTheStagingArea) {
  const size_t n = 10u << 20;  // 40 MiB of floats, at an offset
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) * 0.5f;
  auto a = be().allocate((n + 1024) * sizeof(float)), b = be().allocate(n * sizeof(float));
  be().upload(DevicePtr{a.get(), 4096}, values.data(), n * sizeof(float));
  be().copy(DevicePtr{b.get(), 0}, DevicePtr{a.get(), 4096}, n * sizeof(float));
  EXPECT_EQ(get(b.get(), n), values);
  EXPECT_EQ(get(a.get(), n, 4096), values);
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendConformance,
                         ::testing::Values("cpu", "vulkan", "vulkan_tiled", "required_only"),
                         [](const auto& info) { return info.param; });

#ifdef SHOAL_NO_VULKAN
// A build without the Vulkan backend lists no device and says why.
TEST(VulkanAbsent, NoDeviceAndTheReason) {
  std::string why;
  EXPECT_TRUE(list_vulkan_devices(&why).empty());
  EXPECT_NE(why.find("this build has no Vulkan backend"), std::string::npos) << why;
  EXPECT_THROW(make_vulkan_backend(0, 8), Error);
}
#else
// A device buffer larger than the device can bind is refused by name, so
// no shader ever indexes past a 32-bit offset.
TEST(VulkanLimits, ABufferBeyondTheDevicesRangeIsRefused) {
  std::string why;
  const auto devices = list_vulkan_devices(&why);
  if (devices.empty()) {
    if (std::getenv("SHOAL_REQUIRE_MODELS")) FAIL() << "no Vulkan device: " << why;
    GTEST_SKIP() << "no Vulkan device: " << why;
  }
  VulkanBackend vk(default_vulkan_device(devices), 8);
  const uint64_t range = vk.max_buffer_bytes();
  std::printf("[ vulkan ] maxStorageBufferRange: %llu bytes\n", static_cast<unsigned long long>(range));
  try {
    vk.allocate(range + 1);
    FAIL() << "a buffer of " << range + 1 << " bytes was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot bind a buffer"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace shoal
