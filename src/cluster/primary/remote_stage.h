#pragma once
// A Stage run by workers over the wire: the same call as a LocalStage, so
// the Pipeline cannot tell the difference. With one member it is star mode
// (there and back); with several consecutive members it is a chain: the
// activations go worker to worker and the last one answers the primary —
// N+1 hops instead of 2N. A tensor group's members hold the same layers,
// each a share of every matmul's rows (backend/tensor_split_backend.h): every
// member gets the step, they trade shares among themselves, and the first
// answers for all.
#include <poll.h>

#include <memory>
#include <mutex>
#include <vector>

#include "cluster/wire/activation_codec.h"
#include "cluster/wire/connection.h"
#include "cluster/wire/forward_message.h"
#include "cluster/primary/worker_client.h"
#include "engine/stage.h"

namespace shoal {

struct RemoteMember {
  std::shared_ptr<WorkerClient> client;
  uint32_t stage_id = 0;
  int layer_begin = 0;
  int layer_end = 0;
  StageLoadReport load;  // what the worker reported when it loaded the stage
};

class RemoteStage : public Stage {
 public:
  // n_layer: the model's; a stage that ends the model sends which rows the
  // head reads, and gets back only those.
  enum class Topology { chain, tensor_group };
  // head_vocab: the members hold the output head too (a tensor group that
  // ends the model, loaded with it): the logits' width; 0 when they do not.
  // Rows go out n_embd + side_width wide (the per-layer inputs they carry,
  // gemma4 E2B/E4B) and come back n_embd wide.
  RemoteStage(std::vector<RemoteMember> members, int n_embd, int side_width, int n_layer, wire::WireDType dtype,
              Topology topology = Topology::chain, int head_vocab = 0);

  int layer_begin() const override { return members_.front().layer_begin; }
  int layer_end() const override { return members_.back().layer_end; }
  std::string describe() const override;
  std::vector<StageDevice> devices() const override;
  void forward(const Batch& batch, float* hidden) override;
  // A star stage only: a chain's members judge each other's silence by
  // what they last read, which a step held open across the primary's own
  // compute would let go stale; its steps stay whole.
  bool computes_elsewhere() const override { return members_.size() == 1 || group_; }
  void submit(const Batch& batch, float* hidden) override;
  void collect() override;
  void cancel() noexcept override;
  void truncate_sequence(int seq, int n_pos) override;
  // From the member that holds the layer (not a tensor group's: each member holds a share of the heads).
  LayerCache read_cache(int seq, int layer) override;
  void write_cache(int seq, int layer, const LayerCache& cache) override;
  // To another RemoteStage whose member holding the layer is on the same worker: CACHE_COPY.
  bool copy_cache_to(Stage& to, int seq, int layer) override;
  bool runs_head() const override { return head_vocab_ > 0 && sends_rows_out_; }
  void head_into(float* logits) override { head_into_ = logits; }

 private:
  // Waits for the last member's FORWARD_RESULT; an ERROR from any member
  // (a chain step that failed) ends the wait with that error.
  void receive_result(uint64_t request_id);
  const RemoteMember& holder(int layer) const;

  std::vector<RemoteMember> members_;
  bool group_;       // a tensor group: every member gets the step, the first answers
  size_t answerer_;  // the member whose FORWARD_RESULT ends a step
  int n_embd_;
  int row_width_;              // what FORWARD sends a row: n_embd_ and its per-layer inputs
  std::vector<float> narrow_;  // a result's rows before they go back into the wide rows
  bool sends_rows_out_;  // ends the model and every member takes the rows out
  int head_vocab_;
  float* head_into_ = nullptr;  // for the next step: where its logits go (head_into)
  wire::WireDType dtype_;
  std::vector<wire::ChainHop> route_;
  // Reused every step: no allocation in the token loop.
  std::vector<uint8_t> prefix_, encoded_;
  std::vector<int32_t> rows_out_;  // the pending step's rows the head reads (when sends_rows_out_)
  wire::Frame frame_;
  std::vector<std::unique_lock<std::mutex>> leases_;  // one per member, held from submit to collect
  // The step between submit() and collect().
  uint64_t pending_id_ = 0;  // 0: none; the answerer's request
  std::vector<uint64_t> member_ids_;  // each member's request id for the pending step (a tensor group's)
  float* pending_hidden_ = nullptr;
  int pending_n_ = 0;
  bool pending_rows_out_ = false;  // the answer holds rows_out_'s rows only
  float* pending_logits_ = nullptr;  // the answer is their logits, for here
  void release_leases() noexcept;
  std::vector<pollfd> poll_set_;                      // the members' sockets (chain and group)
};

}  // namespace shoal
