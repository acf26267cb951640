#pragma once
// The primary's side of a cluster: connect to the workers, measure, plan the
// split, load each worker's stage, and hand the Pipeline its stages (a local
// stage for the primary's own layers, remote stages for the rest).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/primary/planner.h"
#include "cluster/primary/worker_client.h"
#include "engine/engine.h"

namespace shoal {

struct ClusterOptions {
  std::vector<std::string> workers;  // --rpc host:port,... in order
  std::optional<std::string> key;
  bool chain = false;                // worker to worker forwarding
  SplitMode split_mode = SplitMode::layer;  // -sm: layers across devices, or across tensor groups of workers
  int group_size = 0;                // --group-size: workers per tensor group, in --rpc order (0: all in one)
  std::string wire_dtype = "f32";    // f32 | f16 | bf16 | q8_0
  std::vector<double> tensor_split;  // llama.cpp --tensor-split
  SplitPolicy split = SplitPolicy::speed;  // --split
  uint64_t reserve_bytes = 256ull << 20;
  uint64_t local_mem = 0;            // --mem: what the primary's own CPU may hold (0: what is free)
  int timeout_ms = wire::kDefaultPeerTimeoutMs;  // --worker-timeout
  bool insecure = false;             // --insecure: plain frames on a trusted network
  bool discover = false;             // --rpc auto: workers found by their beacons (discovery.h)
  int beacon_port = 50053;           // --discover-port
  int discover_wait_ms = 2000;       // --discover-wait: how long to listen before the first plan
  // --prefill-on: workers (in --rpc) that run prompts, every layer split
  // among them by memory, while the plan's stages decode
  // (engine/prompt_stages.h); `shoal plan` also takes "local" and a
  // described cluster's names.
  std::vector<std::string> prefill_on;
  LinkOptions link() const { return {key, timeout_ms, insecure}; }
  Relay relay() const { return chain ? Relay::shoal_chain : Relay::shoal_star; }
  // Called as weights stream to a worker (address, bytes sent, bytes to send).
  std::function<void(const std::string&, uint64_t, uint64_t)> on_progress;
};

// The workers connected and the plan made, nothing loaded (`shoal plan`).
struct ClusterPlan {
  std::vector<std::shared_ptr<WorkerClient>> clients;
  PlanInput input;
  Plan plan;
};
// rewind_rows: rewind_rows_for (engine.h), what a hybrid model's stages keep to take a guess back;
// mtp_draft: the primary holds the MTP draft too (plan_input.h).
ClusterPlan plan_cluster(const gguf::File& file, const ModelConfig& config, int n_ctx, int n_seq, int n_batch,
                         KvTypes kv_types, ThreadPool& pool, const ClusterOptions& options, int rewind_rows = 0,
                         bool mtp_draft = false);

// A StageBuilder for Engine: a ClusterSupervisor (supervisor.h) connects,
// plans, prints the split and loads the stages, and stays with the engine
// to rebuild them when a worker is lost.
StageBuilder cluster_stage_builder(ClusterOptions options);

}  // namespace shoal
