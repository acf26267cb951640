#include "cluster/primary/cluster_stages.h"

#include <algorithm>

#include "cluster/primary/discovery.h"
#include "cluster/primary/plan_input.h"
#include "cluster/primary/supervisor.h"

namespace shoal {

ClusterPlan plan_cluster(const gguf::File& file, const ModelConfig& config, int n_ctx, int n_seq, int n_batch,
                         KvTypes kv_types, ThreadPool& pool, const ClusterOptions& options, int rewind_rows,
                         bool mtp_draft) {
  ClusterPlan cp;
  cp.input = plan_input_for_model(file, config, n_ctx, n_seq, n_batch, kv_types, rewind_rows, mtp_draft);
  cp.input.reserve_bytes = options.reserve_bytes;
  cp.input.tensor_split = options.tensor_split;
  cp.input.split = options.split;
  cp.input.relay = options.relay();
  // Every CPU timed on the model's own weight type.
  const ProbeShape shape = probe_shape_for(file, config);
  DeviceInfo local = probe_local_cpu(pool, shape);
  local.address = "local";
  if (options.local_mem > 0) local.free_memory = std::min(local.free_memory, options.local_mem);
  cp.input.devices.push_back(local);
  std::vector<std::string> workers = options.workers;
  if (options.discover) {
    if (!options.key) fail("--rpc auto needs the cluster key (--key-file or SHOAL_CLUSTER_KEY)");
    for (const auto& a : Discovery::listen_for(*options.key, options.beacon_port, options.discover_wait_ms))
      if (std::find(workers.begin(), workers.end(), a) == workers.end()) workers.push_back(a);
  }
  for (const auto& address : workers) {
    cp.clients.push_back(std::make_shared<WorkerClient>(address, options.link()));
    cp.clients.back()->probe(shape);
    cp.input.devices.push_back(cp.clients.back()->device());
  }
  cp.plan = make_plan(cp.input);
  return cp;
}

StageBuilder cluster_stage_builder(ClusterOptions options) {
  return [options](Engine& engine) {
    auto supervisor = std::make_shared<ClusterSupervisor>(options);
    supervisor->connect_all();
    auto stages = supervisor->rebuild(engine, nullptr);
    engine.set_supervisor(supervisor);
    return stages;
  };
}

}  // namespace shoal
