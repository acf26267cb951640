// The backend conformance suite, the ops only some architectures need
// (OptionalOp: the element-wise ones, the Gated DeltaNet, latent attention),
// on every backend that runs them; a backend that does not is skipped
// (backend_conformance.h says what the suite checks and why).
#include "backend_conformance.h"

namespace shoal {
namespace {

using BackendOptionalOps = BackendConformance;

// The optional element-wise ops, whether a backend runs them itself or
// through Backend's defaults (the host's, or copy_rows).
TEST_P(BackendOptionalOps, OptionalElementwiseOps) {
  std::mt19937 rng(13);
  const int n_rows = 7, half = 131;
  const int64_t n = int64_t{n_rows} * 2 * half;
  std::vector<float> a = random_floats(n, rng), b = random_floats(n, rng);
  for (float& v : a) v *= 9.0f;  // past gpt-oss's clamp at 7 on both sides
  for (float& v : b) v *= 9.0f;
  auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  auto swiglu_oai = [&](int64_t i) {
    const double x = std::min(double(a[i]), 7.0), y = std::clamp(double(b[i]), -7.0, 7.0);
    return x * sigmoid(1.702 * x) * (y + 1);
  };
  {
    SCOPED_TRACE("sigmoid_mul");
    auto x = put(a), gate = put(b);
    be().sigmoid_mul(DevicePtr{x.get(), 0}, DevicePtr{gate.get(), 0}, n);
    const auto got = get(x.get(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = a[i] * sigmoid(b[i]);
      ASSERT_NEAR(got[i], want, 1e-5 * std::fabs(want) + 1e-6) << i;
    }
  }
  {
    SCOPED_TRACE("swiglu_oai");
    auto gate = put(a), up = put(b);
    be().swiglu_oai(DevicePtr{gate.get(), 0}, DevicePtr{up.get(), 0}, DevicePtr{gate.get(), 0}, n);
    const auto got = get(gate.get(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], swiglu_oai(i), 1e-5 * std::fabs(swiglu_oai(i)) + 1e-6) << i;
  }
  {
    SCOPED_TRACE("split_halves");  // a copy: exact
    auto src = put(a);
    auto first = be().allocate(n / 2 * sizeof(float)), second = be().allocate(n / 2 * sizeof(float));
    be().split_halves(DevicePtr{src.get(), 0}, n_rows, half, DevicePtr{first.get(), 0}, DevicePtr{second.get(), 0});
    const auto got_a = get(first.get(), n / 2), got_b = get(second.get(), n / 2);
    for (int r = 0; r < n_rows; ++r)
      for (int i = 0; i < half; ++i) {
        ASSERT_EQ(got_a[r * half + i], a[r * 2 * half + i]) << r << " " << i;
        ASSERT_EQ(got_b[r * half + i], a[r * 2 * half + half + i]) << r << " " << i;
      }
  }
}

// Gated DeltaNet (Backend::delta_net) against a double reference of the
// convolution, the L2 norms and the delta rule: two sequences whose rows
// interleave, one starting at position 0 (its state zeroed) and one going
// on from a state left by an earlier step, value heads sharing key heads in
// turn and in runs, heads past 128 values (one thread per value on the GPU).
// The output and both states; then the same rows one step each give the
// batch's bits.
TEST_P(BackendOptionalOps, GatedDeltaNet) {
  if (!be().runs(OptionalOp::DeltaNet)) GTEST_SKIP() << "this backend does not run gated_delta_net";
  struct Case {
    int head_dim, n_k, n_v;
    bool interleaved;
  };
  for (const Case& c : {Case{32, 2, 4, false}, Case{32, 2, 4, true}, Case{130, 1, 3, false}, Case{64, 3, 3, true}}) {
    SCOPED_TRACE(testing::Message() << "head " << c.head_dim << ", " << c.n_k << " key / " << c.n_v << " value heads"
                                    << (c.interleaved ? ", in runs" : ""));
    std::mt19937 rng(29 + c.head_dim + c.n_v);
    const int hd = c.head_dim, kernel = 4, key_width = hd * c.n_k, width = 2 * key_width + hd * c.n_v;
    const int n = 9, n_seq = 2;
    const size_t conv_seq = static_cast<size_t>(kernel - 1) * width, ssm_seq = static_cast<size_t>(c.n_v) * hd * hd;
    std::vector<float> taps = random_floats(static_cast<int64_t>(width) * kernel, rng), dt = random_floats(c.n_v, rng),
                       a = random_floats(c.n_v, rng);
    for (float& v : a) v = -0.1f - 0.45f * (v + 1.0f);  // negative rates, as the files hold
    Matrix taps_m = held_f32(taps), dt_m = held_f32(dt), a_m = held_f32(a);
    taps_m.rows = width;
    taps_m.cols = kernel;
    for (Matrix* m : {&taps_m, &dt_m, &a_m}) prepare(*m, true);
    const DeltaNetParams params{&taps_m, &dt_m, &a_m, kernel, hd, c.n_k, c.n_v, 1e-6f, c.interleaved};
    const std::vector<float> qkv = random_floats(static_cast<int64_t>(n) * width, rng);
    const std::vector<float> alpha = random_floats(static_cast<int64_t>(n) * c.n_v, rng),
                             beta = random_floats(static_cast<int64_t>(n) * c.n_v, rng);
    std::vector<float> conv0 = random_floats(static_cast<int64_t>(n_seq * conv_seq), rng),
                       ssm0 = random_floats(static_cast<int64_t>(n_seq * ssm_seq), rng);
    for (float& v : ssm0) v *= 0.1f;
    // Rows: sequence 0 from position 0, sequence 1 from position 5, interleaved.
    const std::vector<int32_t> seqs = {0, 1, 1, 0, 0, 1, 0, 1, 0}, pos = {0, 5, 6, 1, 2, 7, 3, 8, 4};

    // The reference, in doubles, row by row.
    std::vector<double> conv(conv0.begin(), conv0.end()), ssm(ssm0.begin(), ssm0.end()), want(static_cast<size_t>(n) * hd * c.n_v);
    for (int t = 0; t < n; ++t) {
      double* cs = conv.data() + seqs[t] * conv_seq;
      double* ss = ssm.data() + seqs[t] * ssm_seq;
      if (pos[t] == 0) {
        std::fill(cs, cs + conv_seq, 0.0);
        std::fill(ss, ss + ssm_seq, 0.0);
      }
      std::vector<double> x(static_cast<size_t>(width));
      for (int ch = 0; ch < width; ++ch) {
        double acc = 0;
        for (int k = 0; k < kernel - 1; ++k) acc += cs[k * width + ch] * taps[ch * kernel + k];
        acc += qkv[t * width + ch] * taps[ch * kernel + kernel - 1];
        for (int k = 0; k + 2 < kernel; ++k) cs[k * width + ch] = cs[(k + 1) * width + ch];
        cs[(kernel - 2) * width + ch] = qkv[t * width + ch];
        x[ch] = acc / (1 + std::exp(-acc));
      }
      for (int head = 0; head < 2 * c.n_k; ++head) {
        double sum = 0;
        for (int i = 0; i < hd; ++i) sum += x[head * hd + i] * x[head * hd + i];
        for (int i = 0; i < hd; ++i) x[head * hd + i] /= std::sqrt(sum + 1e-6);
      }
      for (int h = 0; h < c.n_v; ++h) {
        const int kh = c.interleaved ? h / (c.n_v / c.n_k) : h % c.n_k;
        const double* q = &x[kh * hd];
        const double* k = &x[key_width + kh * hd];
        const double* v = &x[2 * key_width + h * hd];
        const double sp = alpha[t * c.n_v + h] + dt[h];
        const double g = std::exp((sp > 20 ? sp : std::log1p(std::exp(sp))) * a[h]);
        const double b = 1 / (1 + std::exp(-double(beta[t * c.n_v + h])));
        double* S = ss + static_cast<size_t>(h) * hd * hd;  // S[j * hd + i]: row i, column j
        for (int i = 0; i < hd; ++i) {
          double sk = 0;
          for (int j = 0; j < hd; ++j) sk += (S[j * hd + i] *= g) * k[j];
          const double d = (v[i] - sk) * b;
          double o = 0;
          for (int j = 0; j < hd; ++j) o += (S[j * hd + i] += k[j] * d) * q[j];
          want[(static_cast<size_t>(t) * c.n_v + h) * hd + i] = o / std::sqrt(double(hd));
        }
      }
    }

    // The backend: the whole batch in one step, then one row a step.
    auto run = [&](int chunk, std::vector<float>& out, std::vector<float>& conv_out, std::vector<float>& ssm_out) {
      auto conv_b = put(conv0), ssm_b = put(ssm0);
      const RecurrentLayer state{DevicePtr{conv_b.get(), 0}, DevicePtr{ssm_b.get(), 0}, conv_seq * sizeof(float),
                                 ssm_seq * sizeof(float)};
      out.assign(static_cast<size_t>(n) * hd * c.n_v, 0.0f);
      for (int t0 = 0; t0 < n; t0 += chunk) {
        const int m = std::min(chunk, n - t0);
        auto x = put(std::vector<float>(qkv.begin() + t0 * width, qkv.begin() + (t0 + m) * width));
        auto al = put(std::vector<float>(alpha.begin() + t0 * c.n_v, alpha.begin() + (t0 + m) * c.n_v));
        auto bt = put(std::vector<float>(beta.begin() + t0 * c.n_v, beta.begin() + (t0 + m) * c.n_v));
        auto o = be().allocate(static_cast<size_t>(m) * hd * c.n_v * sizeof(float));
        be().begin_step(seqs.data() + t0, pos.data() + t0, m);
        be().delta_net(DevicePtr{x.get(), 0}, DevicePtr{al.get(), 0}, DevicePtr{bt.get(), 0}, state, params, m,
                       DevicePtr{o.get(), 0});
        const auto part = get(o.get(), static_cast<size_t>(m) * hd * c.n_v);
        be().finish_step();
        std::copy(part.begin(), part.end(), out.begin() + static_cast<size_t>(t0) * hd * c.n_v);
      }
      conv_out = get(conv_b.get(), n_seq * conv_seq);
      ssm_out = get(ssm_b.get(), n_seq * ssm_seq);
    };
    std::vector<float> out, conv_out, ssm_out;
    run(n, out, conv_out, ssm_out);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << "output " << i;
    for (size_t i = 0; i < conv.size(); ++i) ASSERT_NEAR(conv_out[i], conv[i], 1e-6) << "convolution state " << i;
    for (size_t i = 0; i < ssm.size(); ++i) ASSERT_NEAR(ssm_out[i], ssm[i], 1e-4 * (1 + std::fabs(ssm[i]))) << "state " << i;
    std::vector<float> out1, conv1, ssm1;
    run(1, out1, conv1, ssm1);
    EXPECT_EQ(std::memcmp(out.data(), out1.data(), out.size() * sizeof(float)), 0) << "one row a step";
    EXPECT_EQ(std::memcmp(ssm_out.data(), ssm1.data(), ssm_out.size() * sizeof(float)), 0) << "one row a step";
  }
}


// Latent attention (deepseek2): one cached row a position (kv_store writes
// K only), every head reading it, V the first v_dim values of that row; the
// output v_dim values a head. Against a double reference over the decoded
// rows, in F32 and F16 caches; the last query alone gives its bits.
TEST_P(BackendOptionalOps, LatentAttentionReadsVFromTheKRow) {
  if (!be().runs(OptionalOp::LatentAttention)) GTEST_SKIP() << "this backend does not run latent_attention";
  for (DType type : {DType::F32, DType::F16}) {
    SCOPED_TRACE(dtype_info(type).name);
    std::mt19937 rng(41);
    const int n_head = 4, head_dim = 96, v_dim = 64, total = 90, n_q = 5;
    const std::vector<float> rows_all = random_floats(static_cast<int64_t>(total) * head_dim, rng);
    const auto q = random_floats(static_cast<int64_t>(n_q) * n_head * head_dim, rng);
    KvLayer kv;
    kv.k_type = kv.v_type = type;
    kv.width = head_dim;
    kv.k_row_bytes = kv.v_row_bytes = row_bytes(type, head_dim);
    kv.k_seq_stride = kv.v_seq_stride = kv.k_row_bytes * total;
    kv.v_in_k = true;
    auto kb = be().allocate(kv.k_seq_stride);
    kv.k = kv.v = DevicePtr{kb.get(), 0};
    auto rb = put(rows_all);
    std::vector<int32_t> seqs(total, 0), pos(total);
    for (int j = 0; j < total; ++j) pos[j] = j;
    be().begin_step(seqs.data(), pos.data(), total);
    be().kv_store(kv, DevicePtr{rb.get(), 0}, DevicePtr{rb.get(), 0}, total);
    be().finish_step();
    std::vector<uint8_t> bytes(kv.k_seq_stride);
    be().download(bytes.data(), kv.k, bytes.size());
    const AttentionShape shape{n_head, 1, head_dim, 1.0f / std::sqrt(96.0f), 0, nullptr, v_dim};
    auto qb = put(q);
    auto ob = be().allocate(static_cast<size_t>(n_q) * n_head * v_dim * 4);
    be().begin_step(seqs.data(), pos.data() + total - n_q, n_q);
    be().attention(DevicePtr{qb.get(), 0}, kv, n_q, shape, DevicePtr{ob.get(), 0});
    const auto got = get(ob.get(), static_cast<size_t>(n_q) * n_head * v_dim);
    be().finish_step();
    std::vector<float> row(head_dim);
    for (int t = 0; t < n_q; ++t)
      for (int h = 0; h < n_head; ++h) {
        const float* qh = q.data() + (t * n_head + h) * head_dim;
        const int last = total - n_q + t;
        std::vector<double> score;
        double top = -1e300;
        for (int p = 0; p <= last; ++p) {
          dequantize_row(type, bytes.data() + p * kv.k_row_bytes, row.data(), head_dim);
          double sum = 0;
          for (int d = 0; d < head_dim; ++d) sum += double(qh[d]) * row[d];
          score.push_back(sum * shape.scale);
          top = std::max(top, score.back());
        }
        std::vector<double> out(v_dim, 0.0);
        double total_weight = 0;
        for (int p = 0; p <= last; ++p) {
          const double e = std::exp(score[p] - top);
          total_weight += e;
          dequantize_row(type, bytes.data() + p * kv.k_row_bytes, row.data(), head_dim);
          for (int d = 0; d < v_dim; ++d) out[d] += e * row[d];
        }
        for (int d = 0; d < v_dim; ++d)
          ASSERT_NEAR(got[(t * n_head + h) * v_dim + d], out[d] / total_weight, 1e-5) << t << " " << h << " " << d;
      }
    const int width = n_head * v_dim;
    auto lb = put(std::vector<float>(q.end() - n_head * head_dim, q.end()));
    auto lo = be().allocate(width * 4);
    be().begin_step(seqs.data(), pos.data() + total - 1, 1);
    be().attention(DevicePtr{lb.get(), 0}, kv, 1, shape, DevicePtr{lo.get(), 0});
    const auto alone = get(lo.get(), width);
    be().finish_step();
    ASSERT_EQ(0, std::memcmp(alone.data(), got.data() + (n_q - 1) * width, width * 4));
  }
}


INSTANTIATE_TEST_SUITE_P(Backends, BackendOptionalOps, ::testing::Values("cpu", "vulkan", "required_only"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace shoal
