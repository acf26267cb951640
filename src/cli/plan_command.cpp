// shoal plan: the split the planner would make, with memory per device and
// the predicted speed. Connects to the workers; loads nothing.
#include <cstdio>

#include "cli/common_options.h"
#include "cluster/wire/handshake.h"
#include "gguf/reader.h"
#include "util/log.h"

namespace shoal::cli {

Command add_plan_command(CLI::App& app) {
  auto o = std::make_shared<CommonOptions>();
  auto* cmd = app.add_subcommand("plan", "show how a model would be split over this machine and the workers");
  add_engine_options(*cmd, *o);
  add_cluster_options(*cmd, *o);
  cmd->add_option("--parallel", o->engine.n_seq, "sequence slots")->capture_default_str();
  return [o] {
    set_verbosity(o->verbosity);
    auto file = gguf::File::open(o->engine.model_path);
    ModelConfig config = ModelConfig::from_gguf(*file);
    o->cluster.key = wire::load_cluster_key(o->key_file);
    ThreadPool pool(o->engine.threads > 0 ? o->engine.threads : ThreadPool::default_threads());
    const int n_ctx = o->engine.n_ctx > 0 ? o->engine.n_ctx : default_context_size(config);
    ClusterPlan cp = plan_cluster(*file, config, n_ctx, o->engine.n_seq, o->engine.n_batch, pool, o->cluster);
    std::printf("model: %s (%s), %d layers, context %d x %d\n", config.name.c_str(), config.arch.c_str(),
                config.n_layer, n_ctx, o->engine.n_seq);
    std::printf("%s", format_plan(cp.plan, cp.input).c_str());
    return 0;
  };
}

Command add_ping_command(CLI::App& app) {
  auto o = std::make_shared<CommonOptions>();
  auto stats = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("ping", "check workers: round trip, device, and with --stats their counters");
  add_cluster_options(*cmd, *o);
  cmd->add_flag("--stats", *stats, "print each worker's STATS as JSON");
  return [o, stats] {
    if (o->cluster.workers.empty()) fail("name the workers with --rpc host:port,...");
    auto key = wire::load_cluster_key(o->key_file);
    for (const auto& address : o->cluster.workers) {
      WorkerClient client(address, key);
      const DeviceInfo& d = client.device();
      std::printf("%s: %.3f ms, %s, %d threads, %.0f MiB free, matvec %.1f GB/s\n", address.c_str(), d.rtt_ms,
                  d.backend.c_str(), d.threads, d.free_memory / 1048576.0, d.matvec_gbps);
      if (*stats) std::printf("%s\n", client.stats().dump().c_str());
    }
    return 0;
  };
}

}  // namespace shoal::cli
