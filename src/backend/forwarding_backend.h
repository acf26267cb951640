#pragma once
// A Backend that hands every call to another one: the base of a backend
// that wraps a device's (the tensor split, tensor_split_backend.h), which
// then overrides only what it changes. before_op() runs ahead of each op
// that reads or writes device memory, so a wrapper that defers work (the
// tensor split's gather of attention's heads) finishes it there.
#include <memory>
#include <utility>

#include "backend/backend.h"

namespace shoal {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  BackendKind kind() const override { return inner_->kind(); }
  uint64_t free_memory() const override { return inner_->free_memory(); }
  std::optional<DeviceCounters> device_counters() const override { return inner_->device_counters(); }

  std::unique_ptr<Buffer> allocate(size_t bytes) override { return inner_->allocate(bytes); }
  float* host_floats(DevicePtr p) override { return inner_->host_floats(p); }
  void upload(DevicePtr dst, const void* src, size_t bytes) override {
    before_op();
    inner_->upload(dst, src, bytes);
  }
  void download(void* dst, DevicePtr src, size_t bytes) override {
    before_op();
    inner_->download(dst, src, bytes);
  }
  void copy(DevicePtr dst, DevicePtr src, size_t bytes) override {
    before_op();
    inner_->copy(dst, src, bytes);
  }
  void copy_rows(DevicePtr dst, int64_t dst_stride, DevicePtr src, int64_t src_stride, int64_t width,
                 int64_t n_rows) override {
    before_op();
    inner_->copy_rows(dst, dst_stride, src, src_stride, width, n_rows);
  }
  size_t kv_row_stride(size_t row_bytes) const override {
    return inner_->kv_row_stride(row_bytes);
  }
  uint64_t prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) override {
    return inner_->prepare_weights(weights, keep);
  }
  uint64_t prepared_bytes(std::span<const WeightToPrepare> weights) const override {
    return inner_->prepared_bytes(weights);
  }

  void begin_step(const int32_t* seq_ids, const int32_t* positions, int n_tokens) override {
    inner_->begin_step(seq_ids, positions, n_tokens);
  }
  void finish_step() override {
    before_op();
    inner_->finish_step();
  }
  void abandon_step() override { inner_->abandon_step(); }

  void matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) override {
    before_op();
    inner_->matmul(w, x, y, n_tokens);
  }
  void matmuls(std::span<const MatmulOutput> outputs, DevicePtr x, int n_tokens) override {
    before_op();
    inner_->matmuls(outputs, x, n_tokens);
  }
  void rmsnorm(DevicePtr x, const Matrix& weight, DevicePtr y, int n_tokens, int n, float eps) override {
    before_op();
    inner_->rmsnorm(x, weight, y, n_tokens, n, eps);
  }
  void rope(DevicePtr x, int n_tokens, int n_heads, const RopeParams& p) override {
    before_op();
    inner_->rope(x, n_tokens, n_heads, p);
  }
  void kv_store(const KvLayer& kv, DevicePtr k, DevicePtr v, int n_tokens) override {
    before_op();
    inner_->kv_store(kv, k, v, n_tokens);
  }
  void attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& shape, DevicePtr out) override {
    before_op();
    inner_->attention(q, kv, n_tokens, shape, out);
  }
  void swiglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override {
    before_op();
    inner_->swiglu(gate, up, out, n);
  }
  void geglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override {
    before_op();
    inner_->geglu(gate, up, out, n);
  }
  void scale(DevicePtr x, float s, int64_t n) override {
    before_op();
    inner_->scale(x, s, n);
  }
  void softcap(DevicePtr x, float cap, int64_t n) override {
    before_op();
    inner_->softcap(x, cap, n);
  }
  void add(DevicePtr y, DevicePtr x, int64_t n) override {
    before_op();
    inner_->add(y, x, n);
  }
  void add_bias(DevicePtr y, const Matrix& bias, int n_tokens, int n) override {
    before_op();
    inner_->add_bias(y, bias, n_tokens, n);
  }
  void get_rows(const Matrix& w, const int32_t* ids, int n, DevicePtr out) override {
    before_op();
    inner_->get_rows(w, ids, n, out);
  }

  void run_routed_experts(const HostRoutes& routes, const std::function<void(int)>& run, DevicePtr out,
                          float* host) override {
    before_op();
    // The inner backend's loop would call `run`, which calls this backend's ops: the same.
    inner_->run_routed_experts(routes, run, out, host);
  }
  bool routes_experts() const override { return inner_->routes_experts(); }
  void route_experts(DevicePtr logits, int n_tokens, int n_expert, int k, float scale, DevicePtr experts,
                     DevicePtr weights) override {
    before_op();
    inner_->route_experts(logits, n_tokens, n_expert, k, scale, experts, weights);
  }
  void matmul_routed(const Matrix& stacked, int64_t expert_rows, DevicePtr x, int x_share, DevicePtr experts,
                     DevicePtr y, int n_slots) override {
    before_op();
    inner_->matmul_routed(stacked, expert_rows, x, x_share, experts, y, n_slots);
  }
  void weighted_sum(DevicePtr rows, DevicePtr weights, int n_tokens, int k, int width, DevicePtr out) override {
    before_op();
    inner_->weighted_sum(rows, weights, n_tokens, k, width, out);
  }

  bool runs(OptionalOp op) const override { return inner_->runs(op); }
  void delta_net(DevicePtr qkv, DevicePtr alpha, DevicePtr beta, const RecurrentLayer& state, const DeltaNetParams& p,
                 int n_tokens, DevicePtr out) override {
    before_op();
    inner_->delta_net(qkv, alpha, beta, state, p, n_tokens, out);
  }
  void sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) override {
    before_op();
    inner_->sigmoid_mul(x, gate, n);
  }
  void split_halves(DevicePtr src, int64_t n_rows, int half, DevicePtr a, DevicePtr b) override {
    before_op();
    inner_->split_halves(src, n_rows, half, a, b);
  }
  void swiglu_oai(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override {
    before_op();
    inner_->swiglu_oai(gate, up, out, n);
  }

 protected:
  virtual void before_op() {}
  Backend& inner() { return *inner_; }
  const Backend& inner() const { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace shoal
