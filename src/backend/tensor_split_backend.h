#pragma once
// A tensor split as a Backend: the members of a group each hold a share of
// every matmul's output rows and compute only those, then exchange the
// shares (an all-gather) so that every member holds the whole output and
// runs the rest of the layer (norms, activations, routing) on it as a local
// run would. Attention is divided by heads: a member computes its heads'
// rows of Q, K and V, caches its KV heads only, attends with its query
// heads, and the members all-gather attention's output instead of Q/K/V.
//
// Why rows and not the reduction: a row is computed by the same kernel over
// the same whole input as in a local run, so a 2- or 4-way group gives the
// local bits, whatever the group (docs/design.md). Splitting a reduction
// (columns) would sum partial dot products in a new order. The price is an
// exchange after attention, the output projection, gate/up and down (four
// a layer) where a column split has two.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/tensor_split_shares.h"

namespace shoal {

// How the members of a group trade their shares. Every member calls
// all_gather in the same order with its own share; from[p] (sized to
// member p's share) receives member p's, from[rank] is left alone.
class RowExchange {
 public:
  virtual ~RowExchange() = default;
  virtual void all_gather(std::span<const float> mine, std::span<const std::span<float>> from) = 0;
};

class TensorSplitBackend : public Backend {
 public:
  TensorSplitBackend(std::unique_ptr<Backend> inner, std::shared_ptr<RowExchange> exchange, int rank,
                     ShareWeights weights);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // How many all-gathers the steps so far made.
  uint64_t exchanges() const { return exchanges_; }

  std::string name() const override { return inner_->name(); }
  BackendKind kind() const override { return inner_->kind(); }
  uint64_t free_memory() const override { return inner_->free_memory(); }
  std::unique_ptr<Buffer> allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void upload(DevicePtr dst, const void* src, size_t bytes) override {
    settle();
    inner_->upload(dst, src, bytes);
  }
  void download(void* dst, DevicePtr src, size_t bytes) override {
    settle();
    inner_->download(dst, src, bytes);
  }
  void copy(DevicePtr dst, DevicePtr src, size_t bytes) override {
    settle();
    inner_->copy(dst, src, bytes);
  }
  void copy_rows(DevicePtr dst, int64_t dst_stride, DevicePtr src, int64_t src_stride, int64_t width,
                 int64_t n_rows) override {
    settle();
    inner_->copy_rows(dst, dst_stride, src, src_stride, width, n_rows);
  }
  void check_kv_rows(size_t k_row_bytes, size_t v_row_bytes) const override {
    inner_->check_kv_rows(k_row_bytes, v_row_bytes);
  }
  // Its share's KV heads once the weights tell that attention is divided by heads.
  int kv_heads_held(int n_head_kv) const override;
  // Keeps this member's share of each matmul weight (a view into the whole
  // matrix) and hands the shares to the inner backend; stacked slices
  // (experts, latent heads) and rows-only tensors go through whole.
  uint64_t prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) override;
  // Whether prepare_weights has the inner backend prepare (on the CPU: copy
  // into groups of eight rows, faster and the same bits) or only notes the
  // shares, the inner backend then reading the held rows where they are: a
  // worker whose lent memory cannot take the copy says false.
  void set_copy_shares(bool copy) { copy_shares_ = copy; }
  uint64_t prepared_bytes(std::span<const WeightToPrepare> weights) const override;
  void begin_step(const int32_t* seq_ids, const int32_t* positions, int n_tokens) override {
    inner_->begin_step(seq_ids, positions, n_tokens);
  }
  void finish_step() override {
    settle();
    inner_->finish_step();
  }
  void abandon_step() override {
    pending_.reset();
    inner_->abandon_step();
  }

  void matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) override;
  void matmuls(std::span<const MatmulOutput> outputs, DevicePtr x, int n_tokens) override;
  void rmsnorm(DevicePtr x, const Matrix& weight, DevicePtr y, int n_tokens, int n, float eps) override {
    settle();
    inner_->rmsnorm(x, weight, y, n_tokens, n, eps);
  }
  void rope(DevicePtr x, int n_tokens, int n_heads, const RopeParams& p) override {
    settle();
    inner_->rope(x, n_tokens, n_heads, p);
  }
  // Divided by heads: this member's KV heads into its narrower cache.
  void kv_store(const KvLayer& kv, DevicePtr k, DevicePtr v, int n_tokens) override;
  // Divided by heads: this member's query heads, their output columns
  // all-gathered before the next op reads them (an output gate's
  // sigmoid_mul runs first, on what the member's own heads hold).
  void attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& shape, DevicePtr out) override;
  void swiglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override {
    settle();
    inner_->swiglu(gate, up, out, n);
  }
  void geglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override {
    settle();
    inner_->geglu(gate, up, out, n);
  }
  void scale(DevicePtr x, float s, int64_t n) override {
    settle();
    inner_->scale(x, s, n);
  }
  void softcap(DevicePtr x, float cap, int64_t n) override {
    settle();
    inner_->softcap(x, cap, n);
  }
  void add(DevicePtr y, DevicePtr x, int64_t n) override {
    settle();
    inner_->add(y, x, n);
  }
  void add_bias(DevicePtr y, const Matrix& bias, int n_tokens, int n) override {
    settle();
    inner_->add_bias(y, bias, n_tokens, n);
  }
  void get_rows(const Matrix& w, const int32_t* ids, int n, DevicePtr out) override {
    settle();
    inner_->get_rows(w, ids, n, out);
  }
  bool holds_expert(int expert, int n_expert) const override;
  void share_expert_rows(float* slots, const int* slot_expert, size_t n_slots, int width, int n_expert) override;
  bool runs(OptionalOp op) const override { return inner_->runs(op); }
  void delta_net(DevicePtr qkv, DevicePtr alpha, DevicePtr beta, const RecurrentLayer& state, const DeltaNetParams& p,
                 int n_tokens, DevicePtr out) override {
    settle();
    inner_->delta_net(qkv, alpha, beta, state, p, n_tokens, out);
  }
  void sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) override;
  void split_halves(DevicePtr src, int64_t n_rows, int half, DevicePtr a, DevicePtr b) override {
    settle();
    inner_->split_halves(src, n_rows, half, a, b);
  }
  void swiglu_oai(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override {
    settle();
    inner_->swiglu_oai(gate, up, out, n);
  }

 private:
  // A split matrix: the whole one's rows, and this member's share of them
  // (`at` the share's first row); by_heads: a Q, K or V projection, whose
  // heads' rows stay with this member (no all-gather).
  struct Split {
    int64_t rows = 0;
    Matrix share;
    int64_t at = 0;
    bool by_heads = false;
  };
  const Split* find(const Matrix& w) const;
  // A stacked expert tensor this member holds experts [first, first + n) of.
  struct Stack {
    const uint8_t* data = nullptr;  // the whole tensor's
    size_t bytes = 0;
    int64_t slice_rows = 0;
    int first = 0;
    Matrix share;  // the held experts, as the inner backend prepared them
  };
  // The held expert `w` (a stacked_slice of a whole stack) is, in the
  // share the inner backend prepared; `w` itself when it is no expert.
  const Matrix* held_expert(const Matrix& w, Matrix& view) const;
  DevicePtr scratch(size_t bytes);
  DevicePtr head_scratch(int n_tokens);
  // Attention's output this member computed only its heads of: gathered
  // from the others before any op but an output gate reads it.
  struct PendingHeads {
    DevicePtr out;
    int n_tokens = 0;
    int v_dim = 0;
  };
  void settle();
  // After an all-gather: each member p's next part, [n][share_of(p).rows()]
  // at offset_[p] of what it sent (mine_ for this member), into columns
  // share_of(p) of the [n][whole] rows at y.
  template <class ShareOf>
  void place_shares(DevicePtr y, int64_t n, int64_t whole, ShareOf share_of);
  bool divides_heads() const { return heads_.has_value(); }

  std::unique_ptr<Backend> inner_;
  std::shared_ptr<RowExchange> exchange_;
  int rank_, size_;
  ShareWeights weights_;
  bool copy_shares_ = true;
  // By the whole matrix's data: the layer code passes the matrices it was
  // bound to, untouched (their shares are what the inner backend prepared).
  std::unordered_map<const uint8_t*, std::unique_ptr<Split>> splits_;
  std::map<const uint8_t*, std::unique_ptr<Stack>> stacks_;  // by the whole tensor's data, for an address lookup
  std::unique_ptr<Buffer> scratch_, head_scratch_;
  size_t scratch_bytes_ = 0, head_scratch_bytes_ = 0;
  // Attention divided by heads (set by prepare_weights from the Q, K, V weights).
  std::optional<AttentionHeads> heads_;
  HeadShare head_share_;
  std::optional<PendingHeads> pending_;
  Matrix sinks_view_;
  // Reused every step: no allocation once the largest step has run.
  std::vector<MatmulOutput> inner_outputs_;
  std::vector<Matrix> expert_views_;
  std::vector<float> expert_mine_;
  std::vector<std::vector<float>> expert_theirs_;
  std::vector<const Split*> split_of_;
  std::vector<float> mine_, whole_;
  std::vector<std::vector<float>> theirs_;
  std::vector<std::span<float>> from_;
  std::vector<int64_t> offset_;  // where each member's next output starts in what it sent
  uint64_t exchanges_ = 0;
};

}  // namespace shoal
