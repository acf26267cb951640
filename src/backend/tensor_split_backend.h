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
// exchange after attention, the output projection, the gated activation of
// gate and up, and down (four a layer) where a column split has two.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/forwarding_backend.h"
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

// The wrapper of a device's backend (forwarding_backend.h): it states
// only the calls a share changes.
class TensorSplitBackend : public ForwardingBackend {
 public:
  TensorSplitBackend(std::unique_ptr<Backend> inner, std::shared_ptr<RowExchange> exchange, int rank,
                     ShareWeights weights);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // How many all-gathers the steps so far made.
  uint64_t exchanges() const { return exchanges_; }
  // Whether this member runs expert `expert` of a mixture of n_expert.
  bool holds_expert(int expert, int n_expert) const;

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
  void abandon_step() override {
    pending_.reset();
    pending_rows_.clear();
    ForwardingBackend::abandon_step();
  }

  void matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) override;
  void matmuls(std::span<const MatmulOutput> outputs, DevicePtr x, int n_tokens) override;
  // Divided by heads: this member's KV heads into its narrower cache
  // (model/weights.h's kv_heads_held sizes it).
  void kv_store(const KvLayer& kv, DevicePtr k, DevicePtr v, int n_tokens) override;
  // Divided by heads: this member's query heads, their output columns
  // all-gathered before the next op reads them (an output gate's
  // sigmoid_mul runs first, on what the member's own heads hold).
  void attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& shape, DevicePtr out) override;
  void sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) override;
  // A gated activation on a gate and up this member computed its rows of
  // (and not yet gathered): on those rows only, then only its output is
  // gathered, half what gate and up would take.
  void swiglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override;
  void geglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override;
  // Divided by expert: this member's experts, then the others' slots from them.
  void run_routed_experts(const HostRoutes& routes, const std::function<void(int)>& run, DevicePtr out,
                          float* host) override;
  // The stacked experts are shares here: the host routes.
  bool routes_experts() const override { return false; }

 protected:
  void before_op() override { settle(); }

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
  // Rows of split matmul outputs this member computed and the others have
  // not been sent yet: gathered (one all-gather for all of them) before
  // any op but a gated activation of them reads them.
  struct PendingRows {
    DevicePtr y;       // the whole output, [n][split->rows]
    const Split* split = nullptr;
    DevicePtr held;    // this member's rows of it, [n][split->share.rows]
  };
  void settle();
  void gather_rows();
  // `activation` of gate and up: with both pending (in that order, the same
  // shares), on the held rows, its output left pending instead; else on the
  // whole rows, gathered first.
  template <class Activation>
  void gated(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n, Activation activation);
  // After an all-gather: each member p's next part, [n][share_of(p).rows()]
  // at offset_[p] of what it sent (mine_ for this member), into columns
  // share_of(p) of the [n][whole] rows at y.
  template <class ShareOf>
  void place_shares(DevicePtr y, int64_t n, int64_t whole, ShareOf share_of);
  bool divides_heads() const { return heads_.has_value(); }

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
  std::vector<PendingRows> pending_rows_;
  int64_t pending_rows_tokens_ = 0;
  Matrix sinks_view_;
  // Reused every step: no allocation once the largest step has run.
  std::vector<MatmulOutput> inner_outputs_;
  std::vector<Matrix> expert_views_;
  std::vector<float> expert_mine_;
  std::vector<int> owner_;  // by expert: the member that holds it
  std::vector<std::vector<float>> expert_theirs_;
  std::vector<const Split*> split_of_;
  std::vector<float> mine_, whole_;
  std::vector<std::vector<float>> theirs_;
  std::vector<std::span<float>> from_;
  std::vector<int64_t> offset_;  // where each member's next output starts in what it sent
  uint64_t exchanges_ = 0;
};

}  // namespace shoal
