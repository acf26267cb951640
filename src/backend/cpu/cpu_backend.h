#pragma once
// The CPU backend: matmuls from the SIMD block dot products in tensor/,
// split over the persistent thread pool by output rows. Its buffers are host
// memory; weights stay in the mapped file (or a stage's buffers), regrouped
// in rows of eight where the matmul reads that faster.
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "util/thread_pool.h"

namespace shoal {

// Host memory as a Buffer, owned.
class HostBuffer : public Buffer {
 public:
  explicit HostBuffer(size_t bytes);
  uint8_t* data() const { return data_.get(); }

 private:
  std::unique_ptr<uint8_t[]> data_;
};

class CpuBackend : public Backend {
 public:
  // max_tokens and max_cols size the activation scratch once, up front.
  CpuBackend(ThreadPool& pool, int max_tokens, int64_t max_cols);
  // What the constructor allocates, for memory planning.
  static size_t scratch_bytes(int max_tokens, int64_t max_cols);

  std::string name() const override { return "CPU"; }
  BackendKind kind() const override { return BackendKind::Cpu; }
  uint64_t free_memory() const override;

  std::unique_ptr<Buffer> allocate(size_t bytes) override;
  void upload(DevicePtr dst, const void* src, size_t bytes) override;
  void download(void* dst, DevicePtr src, size_t bytes) override;
  void copy(DevicePtr dst, DevicePtr src, size_t bytes) override;
  // Regroups the matrices whose type the matmul reads faster in groups of
  // eight rows (tensor/interleave.h); the same bits either way.
  uint64_t prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) override;
  uint64_t prepared_bytes(std::span<const WeightToPrepare> weights) const override;
  void begin_step(const int32_t* seq_ids, const int32_t* positions, int n_tokens) override;
  void finish_step() override { begin_step(nullptr, nullptr, 0); }
  void abandon_step() override { finish_step(); }

  void matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) override;
  void matmuls(std::span<const MatmulOutput> outputs, DevicePtr x, int n_tokens) override;
  void rmsnorm(DevicePtr x, const Matrix& weight, DevicePtr y, int n_tokens, int n, float eps) override;
  void rope(DevicePtr x, int n_tokens, int n_heads, const RopeParams& p) override;
  void kv_store(const KvLayer& kv, DevicePtr k, DevicePtr v, int n_tokens) override;
  void attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& shape, DevicePtr out) override;
  void swiglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override;
  void geglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override;
  void scale(DevicePtr x, float s, int64_t n) override;
  void softcap(DevicePtr x, float cap, int64_t n) override;
  void add(DevicePtr y, DevicePtr x, int64_t n) override;
  void add_bias(DevicePtr y, const Matrix& bias, int n_tokens, int n) override;
  void get_rows(const Matrix& w, const int32_t* ids, int n, DevicePtr out) override;
  bool runs(OptionalOp) const override { return true; }
  float* host_floats(DevicePtr p) override { return floats(p); }
  void delta_net(DevicePtr qkv, DevicePtr alpha, DevicePtr beta, const RecurrentLayer& state,
                 const DeltaNetParams& p, int n_tokens, DevicePtr out) override;
  void sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) override;
  void split_halves(DevicePtr src, int64_t n_rows, int half, DevicePtr a, DevicePtr b) override;
  void swiglu_oai(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override;

  // Matrices multiplied since construction (a test's proof that a GPU run
  // left the CPU idle).
  uint64_t matmul_count() const { return matmul_count_.load(std::memory_order_relaxed); }

  // The host address behind a pointer into one of this backend's buffers.
  static uint8_t* host(DevicePtr p) { return static_cast<HostBuffer*>(p.buffer)->data() + p.offset; }
  static float* floats(DevicePtr p) { return reinterpret_cast<float*>(host(p)); }

 private:
  ThreadPool& pool_;
  int max_tokens_;
  int64_t max_cols_;
  std::atomic<uint64_t> matmul_count_{0};
  const int32_t* step_seq_ids_ = nullptr;   // the step's rows (the caller keeps them until finish_step)
  const int32_t* step_positions_ = nullptr;
  int step_tokens_ = 0;
  std::vector<uint8_t> activation_scratch_;  // activations converted for the weight type
  std::vector<int64_t> first_units_;         // matmuls: each output's first unit of rows
  AttentionScratch attention_scratch_;

  // fn(i0, i1) over [0, n), on the pool when n is large enough to pay.
  void for_elements(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  void check_step(int n_tokens) const;
};

}  // namespace shoal
