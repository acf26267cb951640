#pragma once
// One connection to a worker: the handshake, then requests until the peer
// leaves. A primary's session owns the stages it loads and frees them when
// it ends, however it ends.
#include <memory>
#include <vector>

#include "cluster/wire/connection.h"
#include "cluster/wire/forward_message.h"
#include "cluster/worker/worker_server.h"
#include "model/batch.h"

namespace shoal {

class WorkerSession {
 public:
  WorkerSession(WorkerServer& server, std::shared_ptr<wire::Connection> conn) : s_(server), conn_(std::move(conn)) {}
  void run();

 private:
  void serve();
  void handle(wire::Frame& frame);
  void load_stage(const wire::Frame& request);
  void forward(const wire::Frame& request);
  // PROBE: the device probe on the weight type asked for (the model's).
  void probe(const wire::Frame& request);
  void kv_op(const wire::Frame& request);
  // A sequence's cache of one layer out (CACHE_ROWS) and in (KV_OK).
  void cache_read(const wire::Frame& request);
  void cache_write(const wire::Frame& request);
  // One of its stages' cache of a layer into another of its stages (KV_OK): the rows stay on the machine.
  void cache_copy(const wire::Frame& request);
  void unload(const wire::Frame& request);
  // TENSOR_LINK: this connection becomes a tensor group member's link in.
  void tensor_link(const wire::Frame& request);
  void group_link(const wire::Frame& request);
  // The output head on the rows out of the step just run (hidden_): their
  // logits into logits_.
  void run_head(WorkerStage& stage, std::span<const int32_t> rows_out);
  void release_stages();
  std::shared_ptr<WorkerStage> find_stage(uint32_t id);
  // Sends the activations in hidden_ on to the next hop, or back as the result.
  void send_on(uint64_t request_id, const wire::ForwardView& view, const std::shared_ptr<WorkerStage>& stage);
  std::shared_ptr<wire::Connection> next_hop(const std::string& address, bool fresh);

  WorkerServer& s_;
  std::shared_ptr<wire::Connection> conn_;
  bool is_primary_ = false;
  bool handed_over_ = false;  // the connection now belongs to a tensor group's exchange
  std::vector<uint32_t> owned_;
  // Reused across FORWARDs: no allocation in the steady token loop.
  std::vector<int32_t> positions_, seq_ids_, rows_out_;
  std::vector<int32_t> head_positions_, head_seq_ids_;  // of the rows out, for the head's step
  std::vector<float> hidden_, logits_;
  std::vector<uint8_t> prefix_, encoded_;
  Batch batch_;
};

}  // namespace shoal
