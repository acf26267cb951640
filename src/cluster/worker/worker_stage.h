#pragma once
// A stage a worker holds for its primary: the tensors (received, cached or
// from its own GGUF files), the weights bound to them, the backend of the
// worker's --device and the LocalStage that runs the layers. Shared so that a chain peer still using
// it keeps it alive after the primary leaves.
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cluster/worker/peer_exchange.h"
#include "cluster/worker/weight_cache.h"
#include "engine/local_stage.h"
#include "model/config.h"
#include "model/weights.h"

namespace shoal {

struct WorkerStage {
  uint32_t id = 0;
  ModelConfig config;
  std::vector<TensorBytes> tensors;  // keep the bytes the weights point into alive
  std::vector<ContentHash> hashes;   // of each tensor: a later stage may share it
  ModelWeights weights;
  std::unique_ptr<Backend> backend;  // its own, so a GPU's copy of the weights goes with the stage
  std::unique_ptr<LocalStage> stage;
  // A member of a tensor group: its links to the others (its backend is a
  // TensorSplitBackend over them); null for a stage of its own.
  std::shared_ptr<PeerExchange> exchange;
  uint64_t weight_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t grouped_bytes = 0;  // weights copied into groups of eight rows for the matmul
  bool head = false;           // it holds the output head too (LOAD_STAGE "head"): FORWARD may ask for logits
  std::unique_ptr<Buffer> head_rows, head_logits;  // on its backend, grown to the largest step's
  std::mutex run_mutex;  // one forward or KV operation at a time
};

}  // namespace shoal
