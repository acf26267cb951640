#pragma once
// The CPU backend: matmuls from the SIMD block dot products in tensor/,
// split over the persistent thread pool by output rows.
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "util/thread_pool.h"

namespace shoal {

class CpuBackend : public Backend {
 public:
  // max_tokens and max_cols size the activation scratch once, up front.
  CpuBackend(ThreadPool& pool, int max_tokens, int64_t max_cols);
  // What the constructor allocates, for memory planning.
  static size_t scratch_bytes(int max_tokens, int64_t max_cols);

  std::string name() const override { return "CPU"; }
  void matmul(const Matrix& w, const float* x, float* y, int n_tokens) override;
  void rmsnorm(const float* x, const float* weight, float* y, int n_tokens, int n, float eps) override;
  void rope(float* x, int n_tokens, int n_heads, const int32_t* positions, const RopeParams& p) override;
  void attention(const float* q, const KvLayerView& kv, const int32_t* seq_ids, const int32_t* positions,
                 int n_tokens, const AttentionShape& shape, float* out) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;
  void scale(float* x, float s, int64_t n) override;
  void softcap(float* x, float cap, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;
  void add_bias(float* y, const float* bias, int n_tokens, int n) override;
  void get_rows(const Matrix& w, const int32_t* ids, int n, float* out) override;

 private:
  ThreadPool& pool_;
  int max_tokens_;
  int64_t max_cols_;
  std::vector<uint8_t> activation_scratch_;  // activations converted for the weight type
  AttentionScratch attention_scratch_;
  std::vector<double> rope_freqs_;  // per pair, for the call in progress

  // fn(i0, i1) over [0, n), on the pool when n is large enough to pay.
  void for_elements(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
};

}  // namespace shoal
