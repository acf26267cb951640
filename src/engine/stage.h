#pragma once
// A Stage is a contiguous range of transformer layers on one device, with
// the KV cache of those layers. LocalStage runs on a local Backend; a
// RemoteStage (cluster/) sends the same calls over the wire. The Pipeline
// only sees this interface, so local and distributed runs are the same code.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "model/batch.h"
#include "util/error.h"

namespace shoal {

class Backend;

// Where a stage's layers live, for the split printout, /v1/cluster and the
// dashboard. A chain stage reports one entry per worker.
struct StageDevice {
  std::string address;   // "local" or host:port
  std::string backend;   // "CPU", ...
  int layer_begin = 0;
  int layer_end = 0;     // exclusive
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t free_after = 0;  // the device's free memory after loading (0: unknown)
  double rtt_ms = 0.0;      // primary to device round trip (0 for local)
  bool remote = false;
};

// One layer's part of a sequence's cache (KvCache::read_rows, a DeltaNet's
// RecurrentState::read_state) and how many positions the sequence holds:
// what moves a prompt's cache, layer by layer, from the stage that
// computed it to the stage that decodes with it (same model and cache types).
struct LayerCache {
  int length = 0;
  std::vector<uint8_t> bytes;
};

class Stage {
 public:
  virtual ~Stage() = default;
  virtual int layer_begin() const = 0;
  virtual int layer_end() const = 0;  // exclusive
  virtual std::string describe() const = 0;
  virtual std::vector<StageDevice> devices() const = 0;

  // hidden: the residual stream [batch.size()][n_embd], updated in place;
  // for a model with per-layer inputs (gemma4 E2B/E4B) each row carries
  // them after its n_embd values ([batch.size()][activation_width]), read only.
  // A stage that holds the model's last layer finishes only the rows whose
  // batch.logits is set (the head reads no others) unless batch.all_rows;
  // the other rows are left unfinished, and no one reads them.
  virtual void forward(const Batch& batch, float* hidden) = 0;

  // forward() in two halves, for prompts pipelined through the stages
  // (Pipeline): submit() starts the step and returns, collect() waits for
  // it and leaves the result in `hidden`; between them the caller's thread
  // is free to run another stage. Only a stage that computes elsewhere (a
  // worker) splits: the default does the whole step in submit().
  virtual bool computes_elsewhere() const { return false; }
  virtual void submit(const Batch& batch, float* hidden) { forward(batch, hidden); }
  virtual void collect() {}
  // A submitted step the caller gives up on (another stage failed): its
  // answer, when it comes, is ignored. Never throws.
  virtual void cancel() noexcept {}
  // A stage that ends the model may hold the output head too (a tensor
  // group runs it on its members, each its share of the vocabulary): given
  // `logits` before a step, it leaves there the logits of the rows that
  // want them ([n_logits][n_vocab], in batch order) instead of returning
  // their hidden rows. Applies to the next forward() or submit() only;
  // nullptr (or nothing said): the rows, as always.
  virtual bool runs_head() const { return false; }
  virtual void head_into(float* /*logits*/) {}
  // Cuts one sequence slot's KV back to its first n_pos positions.
  virtual void truncate_sequence(int seq, int n_pos) = 0;
  // A sequence's cache of one of this stage's layers, and back into a slot
  // (which then holds cache.length positions: whole once each of the
  // stage's layers is written). A stage that cannot hand its cache over (a
  // tensor group, whose members each hold a share of the heads) throws.
  virtual LayerCache read_cache(int /*seq*/, int /*layer*/) {
    fail("{} cannot hand over a sequence's cache", describe());
  }
  virtual void write_cache(int /*seq*/, int /*layer*/, const LayerCache& /*cache*/) {
    fail("{} cannot take a sequence's cache", describe());
  }
  // The layer's cache straight into `to` where both are on one machine (the
  // rows never leave it); false where they are not, and the caller moves it.
  virtual bool copy_cache_to(Stage& /*to*/, int /*seq*/, int /*layer*/) { return false; }

  // A stage whose layers run on `backend` may take its rows where they
  // already are: forward_on_device is forward() inside the caller's step on
  // that backend, `rows` its residual stream in the backend's memory (the
  // whole model on one GPU: one submission a step, no round trip through
  // the host between the embedding, the layers and the head).
  virtual bool runs_on(const Backend&) const { return false; }
  virtual void forward_on_device(const Batch&, DevicePtr) { fail("internal: this stage runs elsewhere"); }
};

}  // namespace shoal
