// shoal plan: the split the planner would make, with memory per device and
// the predicted speed. Connects to the workers; loads nothing.
#include <cstdio>

#include <algorithm>

#include "cli/common_options.h"
#include "cli/option_range.h"
#include "cluster/primary/cost_model.h"
#include "cluster/primary/described_cluster.h"
#include "cluster/primary/model_catalogue.h"
#include "cluster/primary/discovery.h"
#include "cluster/primary/plan_input.h"
#include "cluster/primary/prompt_placement.h"
#include "cluster/primary/split_choice.h"
#include "cluster/wire/handshake.h"
#include "gguf/reader.h"
#include "tensor/dtype.h"
#include "util/log.h"
#include "util/printable.h"

namespace shoal::cli {

namespace {

// The model side of a described plan: a GGUF file or a catalogue entry.
PlanInput described_model_input(const CommonOptions& o, std::string& title) {
  const EngineOptions& e = o.engine;
  if (auto m = find_catalogue_model(e.model_path)) {
    PlanInput in = plan_input_for_catalogue_model(*m, e.n_ctx, e.n_seq, e.n_batch, e.kv_types);
    title = fmt::format("{} {} (catalogue: {:.2f} B weights{}, {} layers, {:.1f} GiB), context {} x {}", m->label,
                        m->quant, m->weights / 1e9,
                        m->active_weights < m->weights ? fmt::format(", {:.2f} B read per token", m->active_weights / 1e9)
                                                       : "",
                        m->n_layer, m->weights * m->bits / 8 / 1073741824.0,
                        e.n_ctx > 0 ? e.n_ctx : std::min(m->context, 4096),
                        std::max(1, e.n_seq));
    return in;
  }
  auto file = gguf::File::open(e.model_path);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  const int n_ctx = e.n_ctx > 0 ? e.n_ctx : default_context_size(config);
  title = fmt::format("{} ({}), {} layers, context {} x {}", config.name, config.arch, config.n_layer, n_ctx, e.n_seq);
  return plan_input_for_model(*file, config, n_ctx, e.n_seq, e.n_batch, e.kv_types,
                              rewind_rows_for(config, e.speculative), e.speculative.type == SpecType::Mtp);
}

// What one MTP guess reads: the file's nextn block (mtp_draft_cost); for a
// catalogue model, which does not say whether its files carry the block, a
// layer's share of what a token reads and the head.
double mtp_draft_bytes(const CommonOptions& o) {
  const EngineOptions& e = o.engine;
  if (auto m = find_catalogue_model(e.model_path))
    return (m->active_weights / m->n_layer + static_cast<double>(m->n_vocab) * m->n_embd) * m->bits / 8;
  auto file = gguf::File::open(e.model_path);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  if (config.n_nextn < 1) fail("{} has no multi-token-prediction layers for --spec-type mtp", e.model_path);
  return mtp_draft_cost(*file, config, e.n_ctx, e.n_seq, e.n_batch, e.kv_types).read_bytes;
}

// With -md or --spec-type: the decode a guess per step would give beside the
// plain one (the cost model's roofline; --draft-accept the chance a guessed
// token is right).
void print_speculation(const CommonOptions& o, double draft_accept, const Plan& plan, const PlanInput& input,
                       Relay relay) {
  const SpeculativeOptions& spec = o.engine.speculative;
  if (spec.type == SpecType::None && spec.draft_model.empty()) return;
  Speculation s;
  s.draft_max = spec.draft_max;
  s.acceptance = draft_accept;
  std::string what = "n-gram lookup";
  if (!spec.draft_model.empty()) {
    // A draft step reads the draft's weights once, on the primary.
    double bytes = 0;
    if (auto m = find_catalogue_model(spec.draft_model)) {
      bytes = m->active_weights * m->bits / 8;
    } else {
      for (const auto& t : gguf::File::open(spec.draft_model)->tensors()) bytes += static_cast<double>(t.bytes);
    }
    const double gbps = input.devices.at(0).matvec_gbps > 0 ? input.devices[0].matvec_gbps : 10.0;
    s.draft_token_ms = bytes / (gbps * 1e9) * 1e3;
    what = fmt::format("draft model {} ({:.2f} ms a guessed token on the primary)", spec.draft_model,
                       s.draft_token_ms);
  } else if (spec.type == SpecType::Mtp) {
    // A guess reads the MTP block (one more layer of the model's kind) and the shared head, on the primary.
    if (!spec.draft_model.empty())
      fail("--spec-type mtp drafts with the model's own layers: give -md or --spec-type mtp, not both");
    const double bytes = mtp_draft_bytes(o);
    const double gbps = input.devices.at(0).matvec_gbps > 0 ? input.devices[0].matvec_gbps : 10.0;
    s.draft_token_ms = bytes / (gbps * 1e9) * 1e3;
    what = fmt::format("the model's MTP block ({:.2f} ms a guessed token on the primary)", s.draft_token_ms);
  }
  const SpeculativePrediction p = predict_speculative(plan, input, relay, s);
  std::printf("speculative decoding, %s, %.0f %% of guessed tokens right:\n", printable(what).c_str(),
              draft_accept * 100);
  if (p.draft == 0) {
    std::printf("  no guess length pays: %.2f ms/token either way\n", p.plain_token_ms);
    return;
  }
  std::printf("  tg: %7.2f ms/token (%8.1f tok/s) guessing %d a step (%.2f tokens a step), against %.2f ms/token "
              "(%.1f tok/s) without: %.2fx\n",
              p.token_ms, p.tok_s, p.draft, p.tokens_per_step, p.plain_token_ms, 1e3 / p.plain_token_ms,
              p.plain_token_ms / p.token_ms);
}

// Prompts on the decode plan or on devices of their own (--prefill-on
// names them: described devices by name, workers by address, "local").
struct PromptOptions {
  RequestShape request;
};
void print_prompt_placement(const PromptOptions& o, const CommonOptions& common, const Plan& plan,
                            const PlanInput& input, Relay relay) {
  const EngineOptions& e = common.engine;
  std::vector<int> devices;
  for (const std::string& name : common.cluster.prefill_on) {
    int found = -1;
    for (size_t d = 0; d < input.devices.size(); ++d)
      if (input.devices[d].address == name) found = static_cast<int>(d);
    if (found < 0) {
      std::string known;
      for (const DeviceInfo& d : input.devices) known += (known.empty() ? "" : ", ") + d.address;
      fail("--prefill-on {}: no such device (the plan's devices: {})", printable(name), known);
    }
    devices.push_back(found);
  }
  const PromptPlacement placement =
      choose_prompt_placement(plan, input, relay, o.request, devices, e.n_batch, e.n_ubatch);
  std::printf("%s", format_prompt_placement(placement, plan, input, o.request).c_str());
}

void print_prediction(const char* who, const Prediction& p) {
  std::printf("  %-34s tg: %7.2f ms/token (%8.1f tok/s)   pp%d: %9.1f tok/s", who, p.token_ms, p.tok_s,
              p.prefill_tokens, p.prefill_tok_s);
  if (p.pipelined_prefill_tok_s > 0) std::printf(", pipelined %.1f tok/s", p.pipelined_prefill_tok_s);
  std::printf("\n");
}

// `shoal plan --cluster FILE`: contacts nothing.
int plan_described(CommonOptions& o, const std::string& cluster_file, double draft_accept, const PromptOptions& prompts) {
  if (!o.cluster.workers.empty()) fail("--cluster describes the devices: give it without --rpc");
  std::string title;
  PlanInput input = described_model_input(o, title);
  input.devices = load_described_cluster(cluster_file);
  input.tensor_split = o.cluster.tensor_split;
  resolve_cluster_options(o);
  input.split = o.cluster.split;
  input.relay = o.cluster.relay();
  std::printf("model: %s; cluster: %s (described, nothing contacted)\n", printable(title).c_str(),
              printable(cluster_file).c_str());
  for (const DeviceInfo& d : input.devices)
    std::printf("  %-14s %-22s %.0f GiB usable, decode reads %.0f GB/s%s\n", d.address.c_str(), d.backend.c_str(),
                d.free_memory / 1073741824.0, d.matvec_gbps,
                d.rtt_ms > 0 || d.link_gbps > 0
                    ? fmt::format(", link {:.1f} Gbit/s, {:.2f} ms round trip", d.link_gbps * 8, d.rtt_ms).c_str()
                    : "");
  const size_t n_layers = input.layer_bytes.size();
  if (input.devices.size() > n_layers)
    spdlog::warn("{} devices for {} layers: at most {} can hold a layer, the other {} hold none and add nothing",
                 input.devices.size(), n_layers, n_layers, input.devices.size() - n_layers);
  const Plan plan = make_plan(input);
  std::printf("%s", format_plan(plan, input).c_str());
  // Whether a device holds its one layer only because it was named (also
  // when that leaves nothing for a split by speed to gain: one layer each).
  if (input.split == SplitPolicy::speed && input.tensor_split.empty()) {
    PlanInput lean = input;
    lean.keep_every_device = false;
    const Plan without = make_plan(lean);
    if (without.predicted_token_ms < (1.0 - kSpeedSplitGain) * plan.predicted_token_ms) {
      std::string left_out;
      int n_left_out = 0;
      for (const StageAssignment& s : without.stages)
        if (s.layer_end == s.layer_begin && plan.stages[s.device].layer_end > plan.stages[s.device].layer_begin &&
            ++n_left_out <= 8)
          left_out += (left_out.empty() ? "" : ", ") + input.devices[s.device].address;
      if (n_left_out > 8) left_out += fmt::format(" and {} more", n_left_out - 8);
      std::printf("with no layers on %s: %.2f ms/token (%.1f tok/s) — every device named keeps a layer, and these "
                  "only slow a step down\n",
                  left_out.c_str(), without.predicted_token_ms, without.predicted_tok_s);
    }
  }
  // Beside it, what llama.cpp's RPC backend would do with the same devices:
  // its default split (by memory) and its relay.
  PlanInput llama = input;
  llama.split = SplitPolicy::memory;
  llama.relay = Relay::llama_rpc;
  std::printf("predicted (decode one token; a prompt of 512 in batches of %d, stage after stage, and pipelined in "
              "micro-batches of %d where it can be; llama.cpp: one batch):\n",
              o.engine.n_batch, o.engine.n_ubatch);
  print_prediction(fmt::format("{}, split by {}", relay_name(input.relay),
                               plan.split == SplitPolicy::speed ? "speed" : "memory")
                       .c_str(),
                   predict(plan, input, input.relay, 512, o.engine.n_ubatch, o.engine.n_batch));
  print_prediction("llama.cpp RPC, split by memory", predict(make_plan(llama), llama, Relay::llama_rpc));
  // Described machines: a worker would run beside the primary, so its machine is a member too.
  std::printf("%s", format_split_choice(choose_split(o.cluster.split_mode, plan, input, o.cluster.group_size, true),
                                        input)
                        .c_str());
  print_speculation(o, draft_accept, plan, input, input.relay);
  print_prompt_placement(prompts, o, plan, input, input.relay);
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto o = std::make_shared<CommonOptions>();
  auto cluster_file = std::make_shared<std::string>();
  auto draft_accept = std::make_shared<double>(0.7);
  auto* cmd = app.add_subcommand("plan", "show how a model would be split over this machine and the workers");
  add_engine_options(*cmd, *o);
  add_cluster_options(*cmd, *o);
  add_speculative_options(*cmd, *o);
  cmd->add_option("--draft-accept", *draft_accept,
                  "with -md or --spec-type: the share of guessed tokens expected to be right (`shoal bench` and "
                  "/metrics measure it)")
      ->capture_default_str()
      ->check(number_in(0.0, 0.99));
  cmd->add_option("--parallel", o->engine.n_seq, "sequence slots")
      ->capture_default_str()
      ->check(whole_number_in(1, 256));
  cmd->add_option("--cluster", *cluster_file,
                  "a cluster described in a TOML file instead of the workers (examples/clusters/): what would fit, "
                  "how it would split, how fast");
  auto prompts = std::make_shared<PromptOptions>();
  cmd->add_option("--prompt-tokens", prompts->request.prompt_tokens,
                  "the request whose time to first token and total time are predicted: its prompt")
      ->capture_default_str()
      ->check(whole_number_in(1, 1 << 20));
  cmd->add_option("--gen-tokens", prompts->request.generated, "... and the tokens it generates")
      ->capture_default_str()
      ->check(whole_number_in(1, 1 << 20));
  return [o, cluster_file, draft_accept, prompts] {
    set_verbosity(o->verbosity);
    if (!cluster_file->empty()) return plan_described(*o, *cluster_file, *draft_accept, *prompts);
    if (find_catalogue_model(o->engine.model_path))
      fail("{} is a catalogue model: plan it on a described cluster (--cluster FILE)", o->engine.model_path);
    auto file = gguf::File::open(o->engine.model_path);
    ModelConfig config = ModelConfig::from_gguf(*file);
    resolve_cluster_options(*o);
    ThreadPool pool(o->engine.threads > 0 ? o->engine.threads : ThreadPool::default_threads());
    const int n_ctx = o->engine.n_ctx > 0 ? o->engine.n_ctx : default_context_size(config);
    ClusterPlan cp = plan_cluster(*file, config, n_ctx, o->engine.n_seq, o->engine.n_batch, o->engine.kv_types, pool,
                                  o->cluster, rewind_rows_for(config, o->engine.speculative),
                                  o->engine.speculative.type == SpecType::Mtp);
    std::printf("model: %s (%s), %d layers, context %d x %d\n", config.name.c_str(), config.arch.c_str(),
                config.n_layer, n_ctx, o->engine.n_seq);
    std::printf("%s", format_plan(cp.plan, cp.input).c_str());
    std::printf("%s", format_split_choice(choose_split(o->cluster.split_mode, cp.plan, cp.input, o->cluster.group_size), cp.input).c_str());
    print_speculation(*o, *draft_accept, cp.plan, cp.input, cp.input.relay);
    print_prompt_placement(*prompts, *o, cp.plan, cp.input, cp.input.relay);
    return 0;
  };
}

Command add_ping_command(CLI::App& app) {
  auto o = std::make_shared<CommonOptions>();
  auto stats = std::make_shared<bool>(false);
  auto discover = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("ping", "check workers: round trip, device, and with --stats their counters");
  add_cluster_options(*cmd, *o);
  cmd->add_flag("--stats", *stats, "print each worker's STATS as JSON");
  cmd->add_flag("--discover", *discover, "list the workers advertising on the LAN with our key (same as --rpc auto)");
  return [o, stats, discover] {
    resolve_cluster_options(*o);
    if (*discover || o->cluster.discover) {
      if (!o->cluster.key) fail("discovery needs the cluster key (--key-file or SHOAL_CLUSTER_KEY)");
      const auto found = Discovery::listen_for(*o->cluster.key, o->cluster.beacon_port, o->cluster.discover_wait_ms);
      std::printf("%zu worker(s) advertising with this key in %.1f s\n", found.size(),
                  o->cluster.discover_wait_ms / 1000.0);
      for (const auto& a : found)
        if (std::find(o->cluster.workers.begin(), o->cluster.workers.end(), a) == o->cluster.workers.end())
          o->cluster.workers.push_back(a);
    }
    if (o->cluster.workers.empty()) {
      if (*discover || o->cluster.discover) return 1;  // said above: none advertise with this key
      fail("name the workers with --rpc host:port,... (or --discover)");
    }
    for (const auto& address : o->cluster.workers) {
      WorkerClient client(address, o->cluster.link());
      const DeviceInfo& d = client.device();
      std::printf("%s: %.3f ms, link %.2f GB/s, %s, %d threads, %.0f MiB free, matvec %.1f GB/s\n", address.c_str(),
                  d.rtt_ms, d.link_gbps, d.backend.c_str(), d.threads, d.free_memory / 1048576.0, d.matvec_gbps);
      if (*stats) std::printf("%s\n", client.stats().dump().c_str());
    }
    return 0;
  };
}

}  // namespace shoal::cli
