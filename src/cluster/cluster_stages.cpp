#include "cluster/cluster_stages.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "cluster/activation_codec.h"
#include "cluster/plan_input.h"
#include "cluster/remote_stage.h"
#include "util/log.h"

namespace shoal {
namespace {

// "loading 127.0.0.1:50052  12.0/32.5 MiB  85.1 MiB/s  ETA 0.2 s" on stderr,
// redrawn in place on a terminal, printed once when done otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2)) {}
  void update(uint64_t sent, uint64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (!tty_ || (sent < total && now - last_ < std::chrono::milliseconds(100))) return;
    last_ = now;
    std::fprintf(stderr, "\r%s", line(sent, total).c_str());
    if (sent >= total) std::fputc('\n', stderr);
  }
  std::string line(uint64_t sent, uint64_t total) const {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = s > 0 ? sent / s : 0;
    return fmt::format("loading {}  {:.1f}/{:.1f} MiB  {:.1f} MiB/s  ETA {:.1f} s", label_, sent / 1048576.0,
                       total / 1048576.0, rate / 1048576.0, rate > 0 ? (total - sent) / rate : 0.0);
  }

 private:
  std::string label_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};

}  // namespace

ClusterPlan plan_cluster(const gguf::File& file, const ModelConfig& config, int n_ctx, int n_seq, int n_batch,
                         ThreadPool& pool, const ClusterOptions& options) {
  ClusterPlan cp;
  cp.input = plan_input_for_model(file, config, n_ctx, n_seq, n_batch);
  cp.input.reserve_bytes = options.reserve_bytes;
  cp.input.tensor_split = options.tensor_split;
  DeviceInfo local = probe_local_cpu(pool);
  local.address = "local";
  cp.input.devices.push_back(local);
  for (const auto& address : options.workers) {
    cp.clients.push_back(std::make_shared<WorkerClient>(address, options.key));
    cp.input.devices.push_back(cp.clients.back()->device());
  }
  cp.plan = make_plan(cp.input);
  return cp;
}

StageBuilder cluster_stage_builder(ClusterOptions options) {
  return [options](Engine& engine) {
    const wire::WireDType dtype = wire::parse_wire_dtype(options.wire_dtype);
    const ModelConfig& config = engine.config();
    ClusterPlan cp = plan_cluster(engine.file(), config, engine.n_ctx(), engine.options().n_seq, engine.n_batch(),
                                  engine.pool(), options);
    std::fprintf(stderr, "%s", format_plan(cp.plan, cp.input).c_str());

    TensorHashes hashes(engine.file());
    std::vector<std::unique_ptr<Stage>> stages;
    std::vector<RemoteMember> chain;  // consecutive remote stages waiting to become one chain
    auto flush_chain = [&] {
      if (chain.empty()) return;
      stages.push_back(std::make_unique<RemoteStage>(std::move(chain), config.n_embd, dtype));
      chain.clear();
    };
    for (const StageAssignment& a : cp.plan.stages) {
      if (a.layer_begin == a.layer_end) continue;
      if (a.device == 0) {
        flush_chain();
        stages.push_back(engine.make_local_stage(a.layer_begin, a.layer_end));
        continue;
      }
      auto& client = cp.clients[a.device - 1];
      ProgressBar bar(client->address());
      StageLoadReport r =
          client->load_stage(engine.file(), hashes, config, a.layer_begin, a.layer_end, engine.options().n_seq,
                             engine.n_ctx(), engine.n_batch(), [&](uint64_t sent, uint64_t total) {
                               bar.update(sent, total);
                               if (options.on_progress) options.on_progress(client->address(), sent, total);
                             });
      std::fprintf(stderr,
                   "%s: layers %d-%d loaded in %.2f s: %.1f MiB sent (%d tensors), %d tensors from its cache, %d from "
                   "its models dir\n",
                   client->address().c_str(), a.layer_begin, a.layer_end - 1, r.seconds, r.sent_bytes / 1048576.0,
                   r.tensors_sent, r.from_cache, r.from_models_dir);
      RemoteMember member{client, r.stage_id, a.layer_begin, a.layer_end, r};
      if (!options.chain) {
        stages.push_back(std::make_unique<RemoteStage>(std::vector<RemoteMember>{member}, config.n_embd, dtype));
      } else {
        chain.push_back(member);
      }
    }
    flush_chain();
    return stages;
  };
}

}  // namespace shoal
