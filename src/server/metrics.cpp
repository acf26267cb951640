#include "server/metrics.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>

namespace shoal::server {
namespace {

using nlohmann::json;

// Prometheus label values escape backslash, quote and newline.
std::string label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

json progress_json(const std::optional<LoadProgress>& p) {
  if (!p) return nullptr;
  return {{"device", p->device}, {"sent_bytes", p->sent_bytes}, {"total_bytes", p->total_bytes},
          {"mib_per_s", p->mib_per_s}};
}

// A stage's devices joined for a label: a chain stage spans several workers
// but has one time.
std::string stage_label(const std::vector<StageDevice>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ",") + d.address;
  return s;
}

}  // namespace

void Metrics::start_rate_sampling(const Scheduler& scheduler) {
  stop_rate_sampling();
  {
    std::lock_guard lock(mutex_);
    stopping_ = false;
  }
  sampler_ = std::thread([this, &scheduler] {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      const uint64_t tokens = scheduler.stats().tokens_out;
      lock.lock();
      samples_[next_] = {std::chrono::steady_clock::now(), tokens};
      next_ = (next_ + 1) % kSamples;
      n_samples_ = std::min(n_samples_ + 1, kSamples);
      stop_wake_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stopping_; });
    }
  });
}

void Metrics::stop_rate_sampling() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

double Metrics::generation_tokens_per_second() const {
  std::lock_guard lock(mutex_);
  if (n_samples_ < 2) return 0.0;
  const Sample& newest = samples_[(next_ + kSamples - 1) % kSamples];
  const Sample& oldest = samples_[n_samples_ < kSamples ? 0 : next_];
  const double seconds = std::chrono::duration<double>(newest.time - oldest.time).count();
  return seconds > 0 ? static_cast<double>(newest.tokens_out - oldest.tokens_out) / seconds : 0.0;
}

void Metrics::count_http(int status) {
  if (status < 300) ++http_2xx_;
  else if (status >= 400 && status < 500) ++http_4xx_;
  else if (status >= 500) ++http_5xx_;
  if (status == 401) ++http_401_;
  if (status == 413) ++http_413_;
  if (status == 503) ++http_503_;
}

void Metrics::count_finished(const RequestResult& result) {
  tokens_reused_ += static_cast<uint64_t>(result.n_reused);
  if (result.finish_reason == "cancelled") ++cancelled_;
  if (result.finish_reason == "error") ++errors_;
}

std::string Metrics::prometheus(const ClusterView& view) const {
  std::string out;
  const SchedulerStats stats = view.stats ? *view.stats : SchedulerStats{};

  metric(out, "shoal_state", "gauge", "1 for the server's current state (loading, ready, degraded)");
  for (Phase p : {Phase::Loading, Phase::Ready, Phase::Degraded})
    out += fmt::format("shoal_state{{state=\"{}\"}} {}\n", phase_name(p), view.status.phase == p ? 1 : 0);

  metric(out, "shoal_requests_total", "counter", "generation requests finished");
  out += fmt::format("shoal_requests_total {}\n", stats.requests);
  metric(out, "shoal_requests_cancelled_total", "counter", "requests ended by a client that went away (or shutdown)");
  out += fmt::format("shoal_requests_cancelled_total {}\n", cancelled_.load());
  metric(out, "shoal_requests_failed_total", "counter", "requests ended by an engine error");
  out += fmt::format("shoal_requests_failed_total {}\n", errors_.load());
  metric(out, "shoal_http_responses_total", "counter", "HTTP responses by status class");
  out += fmt::format("shoal_http_responses_total{{class=\"2xx\"}} {}\n", http_2xx_.load());
  out += fmt::format("shoal_http_responses_total{{class=\"4xx\"}} {}\n", http_4xx_.load());
  out += fmt::format("shoal_http_responses_total{{class=\"5xx\"}} {}\n", http_5xx_.load());
  out += fmt::format("shoal_http_responses_total{{status=\"401\"}} {}\n", http_401_.load());
  out += fmt::format("shoal_http_responses_total{{status=\"413\"}} {}\n", http_413_.load());
  out += fmt::format("shoal_http_responses_total{{status=\"503\"}} {}\n", http_503_.load());

  const PromptStages::Moves moves = view.engine ? view.engine->pipeline().cache_moves() : PromptStages::Moves{};
  metric(out, "shoal_prompt_caches_moved_total", "counter",
         "prompts' caches moved from their own stages (--prefill-on) to the stages that generate");
  out += fmt::format("shoal_prompt_caches_moved_total {}\n", moves.sequences);
  metric(out, "shoal_prompt_cache_bytes_moved_total", "counter", "the bytes of those caches");
  out += fmt::format("shoal_prompt_cache_bytes_moved_total {}\n", moves.bytes);

  metric(out, "shoal_tokens_in_total", "counter", "prompt tokens processed (reused KV excluded)");
  out += fmt::format("shoal_tokens_in_total {}\n", stats.tokens_in);
  metric(out, "shoal_tokens_reused_total", "counter", "prompt tokens whose KV a slot already held");
  out += fmt::format("shoal_tokens_reused_total {}\n", tokens_reused_.load());
  metric(out, "shoal_tokens_out_total", "counter", "tokens generated");
  out += fmt::format("shoal_tokens_out_total {}\n", stats.tokens_out);
  metric(out, "shoal_draft_tokens_total", "counter", "speculative guesses checked by the model");
  out += fmt::format("shoal_draft_tokens_total {}\n", stats.drafted);
  metric(out, "shoal_draft_accepted_total", "counter", "speculative guesses that were right");
  out += fmt::format("shoal_draft_accepted_total {}\n", stats.accepted);
  metric(out, "shoal_draft_acceptance_rate", "gauge", "right guesses over checked ones, since the start");
  out += fmt::format("shoal_draft_acceptance_rate {:.4f}\n",
                     stats.drafted ? static_cast<double>(stats.accepted) / static_cast<double>(stats.drafted) : 0.0);
  metric(out, "shoal_generation_tokens_per_second", "gauge", "tokens generated per second over the last ~5 s");
  out += fmt::format("shoal_generation_tokens_per_second {:.3f}\n", generation_tokens_per_second());
  metric(out, "shoal_queue_depth", "gauge", "requests waiting for a slot");
  out += fmt::format("shoal_queue_depth {}\n", stats.queued);
  metric(out, "shoal_active_slots", "gauge", "slots running a request");
  out += fmt::format("shoal_active_slots {}\n", stats.active);
  metric(out, "shoal_slots", "gauge", "sequence slots (--parallel)");
  out += fmt::format("shoal_slots {}\n", stats.slots);
  metric(out, "shoal_busy_seconds_total", "counter", "seconds inside forward passes");
  out += fmt::format("shoal_busy_seconds_total {:.6f}\n", stats.busy_seconds);

  if (!view.engine) return out;
  // Seconds are written by the engine thread after each stage's forward; a
  // read here may see the previous step's value, which a scrape tolerates.
  const std::vector<StageSnapshot> stages = view.engine->pipeline().snapshot();
  metric(out, "shoal_stage_seconds_total", "counter", "seconds spent in each stage's forward (device, layers)");
  for (const StageSnapshot& st : stages)
    out += fmt::format("shoal_stage_seconds_total{{device=\"{}\",layers=\"{}-{}\"}} {:.6f}\n",
                       label(stage_label(st.devices)), st.layer_begin, st.layer_end - 1, st.seconds);
  metric(out, "shoal_link_rtt_ms", "gauge", "round trip from the primary to each worker, measured at connect");
  for (const auto& stage : stages)
    for (const StageDevice& d : stage.devices)
      if (d.remote) out += fmt::format("shoal_link_rtt_ms{{device=\"{}\"}} {:.3f}\n", label(d.address), d.rtt_ms);
  metric(out, "shoal_device_weight_bytes", "gauge", "layer weights held by each device");
  for (const auto& stage : stages)
    for (const StageDevice& d : stage.devices)
      out += fmt::format("shoal_device_weight_bytes{{device=\"{}\"}} {}\n", label(d.address), d.weight_bytes);
  if (StageSupervisor* sup = view.engine->supervisor()) {
    const SupervisorStatus ss = sup->status();
    metric(out, "shoal_worker_up", "gauge", "1 while a worker is connected (active, idle or rejoining), 0 while lost");
    for (const MemberStatus& m : ss.members)
      out += fmt::format("shoal_worker_up{{device=\"{}\"}} {}\n", label(m.address), member_connected(m.state) ? 1 : 0);
    metric(out, "shoal_worker_losses_total", "counter", "times each worker was lost");
    for (const MemberStatus& m : ss.members)
      out += fmt::format("shoal_worker_losses_total{{device=\"{}\"}} {}\n", label(m.address), m.losses);
    metric(out, "shoal_replans_total", "counter", "stage sets rebuilt after a loss or a rejoin");
    out += fmt::format("shoal_replans_total {}\n", stats.rebuilds);
    metric(out, "shoal_last_recovery_seconds", "gauge",
           "the last rebuild, from noticing the change to carrying on (re-plan, load, KV replay)");
    out += fmt::format("shoal_last_recovery_seconds {:.3f}\n", stats.last_rebuild_seconds);
  }
  metric(out, "shoal_device_kv_bytes", "gauge", "KV cache held by each device");
  for (const auto& stage : stages)
    for (const StageDevice& d : stage.devices)
      out += fmt::format("shoal_device_kv_bytes{{device=\"{}\"}} {}\n", label(d.address), d.kv_bytes);
  return out;
}

namespace {

// The plan's decode-step prediction for this device's layers (0: none).
double predicted_ms(const std::vector<StagePrediction>& predicted, const StageDevice& d) {
  for (const StagePrediction& p : predicted)
    if (p.address == d.address && p.layer_begin == d.layer_begin && p.layer_end == d.layer_end) return p.predicted_ms;
  return 0.0;
}

}  // namespace

json Metrics::cluster(const ClusterView& view) const {
  json model = {{"id", view.model_id}, {"name", view.model_id}, {"arch", ""}, {"n_layer", 0},
                {"file", file_name(view.model_path)}};
  json devices = json::array();
  const char* state = phase_name(view.status.phase);
  if (view.engine) {
    Engine& engine = *view.engine;
    const ModelConfig& c = engine.config();
    if (!c.name.empty()) model["name"] = c.name;
    model["arch"] = c.arch;
    model["n_layer"] = c.n_layer;
    model["n_ctx"] = engine.n_ctx();
    model["n_vocab"] = c.n_vocab;
    model["chat_template"] = engine.chat_template().name();
    model["note"] = "the embedding and the output head run on the primary (local)";
    const std::vector<StageSnapshot> stages = engine.pipeline().snapshot();
    // Degraded: the devices the supervisor has lost are the ones at fault;
    // with none known lost, all of them are suspect.
    std::set<std::string> lost;
    std::vector<StagePrediction> predicted;
    if (StageSupervisor* sup = engine.supervisor()) {
      const SupervisorStatus ss = sup->status();
      for (const MemberStatus& m : ss.members)
        if (m.state == MemberState::Lost || m.state == MemberState::Unreachable) lost.insert(m.address);
      predicted = ss.predicted;
    }
    for (size_t i = 0; i < stages.size(); ++i) {
      for (const StageDevice& d : stages[i].devices) {
        const char* device_state = state;
        if (view.status.phase == Phase::Degraded && !lost.empty() && !lost.contains(d.address))
          device_state = phase_name(Phase::Ready);
        devices.push_back({{"address", d.address}, {"backend", d.backend}, {"layer_begin", d.layer_begin},
                           {"layer_end", d.layer_end}, {"weight_bytes", d.weight_bytes}, {"kv_bytes", d.kv_bytes},
                           {"free_bytes", d.free_after}, {"rtt_ms", d.rtt_ms}, {"remote", d.remote},
                           {"state", device_state}, {"stage_seconds", stages[i].seconds},
                           {"predicted_ms", predicted_ms(predicted, d)},
                           {"measured_ms", stages[i].decode_steps ? stages[i].decode_seconds * 1e3 /
                                                                       stages[i].decode_steps
                                                                 : 0.0},
                           {"decode_steps", stages[i].decode_steps}});
      }
    }
  } else {
    // Still loading: the devices asked for, without a split yet.
    std::vector<std::string> addresses{"local"};
    addresses.insert(addresses.end(), view.workers.begin(), view.workers.end());
    for (const auto& a : addresses)
      devices.push_back({{"address", a}, {"backend", ""}, {"layer_begin", 0}, {"layer_end", 0}, {"weight_bytes", 0},
                         {"kv_bytes", 0}, {"free_bytes", 0}, {"rtt_ms", 0.0}, {"remote", a != "local"},
                         {"state", state}, {"stage_seconds", 0.0}});
  }
  // Prompts on stages of their own (--prefill-on): where, and the caches moved from them.
  json prompt_devices = json::array();
  json cache_moves = {{"sequences", 0}, {"bytes", 0}, {"kept_layers", 0}, {"seconds", 0.0}};
  if (view.engine) {
    for (const StageDevice& d : view.engine->pipeline().prompt_devices())
      prompt_devices.push_back({{"address", d.address}, {"backend", d.backend}, {"layer_begin", d.layer_begin},
                                {"layer_end", d.layer_end}, {"weight_bytes", d.weight_bytes}, {"kv_bytes", d.kv_bytes}});
    const PromptStages::Moves moves = view.engine->pipeline().cache_moves();
    cache_moves = {{"sequences", moves.sequences}, {"bytes", moves.bytes}, {"kept_layers", moves.kept_layers},
                   {"seconds", moves.seconds}};
  }
  const SchedulerStats stats = view.stats ? *view.stats : SchedulerStats{};
  json throughput = {{"tokens_in", stats.tokens_in}, {"tokens_out", stats.tokens_out}, {"requests", stats.requests},
                     {"active", stats.active}, {"queued", stats.queued}, {"slots", stats.slots},
                     {"gen_tok_s", generation_tokens_per_second()}, {"drafted", stats.drafted},
                     {"draft_accepted", stats.accepted}};
  json members = nullptr;
  if (view.engine && view.engine->supervisor()) {
    const SupervisorStatus ss = view.engine->supervisor()->status();
    members = json::array();
    for (const MemberStatus& m : ss.members)
      members.push_back({{"address", m.address}, {"state", member_state_name(m.state)}, {"losses", m.losses},
                         {"last_error", m.last_error.empty() ? json(nullptr) : json(m.last_error)}});
    throughput["replans"] = ss.replans;
    throughput["last_loss_unix"] = ss.last_loss_unix;
    throughput["last_recovery_seconds"] = stats.last_rebuild_seconds;
  }
  return {{"model", std::move(model)},
          {"state", state},
          {"workers", std::move(members)},
          {"reason", view.status.reason.empty() ? json(nullptr) : json(view.status.reason)},
          {"progress", progress_json(view.status.progress)},
          {"devices", std::move(devices)},
          {"prompt_devices", std::move(prompt_devices)},
          {"cache_moves", std::move(cache_moves)},
          {"throughput", std::move(throughput)}};
}

}  // namespace shoal::server
