#include "cluster/primary/supervisor.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <tuple>

#include "cluster/primary/plan_input.h"
#include "cluster/primary/progress_bar.h"
#include "cluster/primary/prompt_placement.h"
#include "cluster/primary/remote_stage.h"
#include "cluster/primary/split_choice.h"
#include "cluster/wire/activation_codec.h"
#include "util/log.h"

#include <fmt/ranges.h>

namespace shoal {
namespace {

// A worker that answered its LOAD_STAGE with an error (out of memory, say):
// connected, but not usable for this plan.
class StageRefused : public Error {
 public:
  StageRefused(std::string address, const WorkerClient* client, const std::string& why)
      : Error(why), address(std::move(address)), client(client) {}
  std::string address;
  const WorkerClient* client;  // identity only: a reconnected worker is not at fault
};

// A tensor group whose members could not link to each other (a firewall
// between them, say, while the primary reaches each): the group is given
// up for a layer split, nobody is lost.
class GroupUnlinked : public Error {
 public:
  GroupUnlinked(std::vector<std::string> members, const std::string& why)
      : Error(why), members(std::move(members)) {}
  std::vector<std::string> members;  // sorted
};

// GROUP_LINK to every member at once (each waits for the others' links).
// A member the primary lost meanwhile is that worker's loss (its
// LinkError, first: nothing is said of the group); a member that could not
// link with another (its ERROR Timeout) is GroupUnlinked; anything else is
// rethrown as it is.
void link_group(const std::vector<RemoteMember>& members) {
  std::vector<std::exception_ptr> failed(members.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        members[i].client->link_group(members[i].stage_id);
      } catch (...) {
        failed[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& f : failed) {
    try {
      if (f) std::rethrow_exception(f);
    } catch (const wire::LinkError&) {
      throw;
    } catch (...) {
    }
  }
  std::vector<std::string> addresses;
  for (const RemoteMember& m : members) addresses.push_back(m.client->address());
  std::sort(addresses.begin(), addresses.end());
  for (const auto& f : failed) {
    if (!f) continue;
    try {
      std::rethrow_exception(f);
    } catch (const wire::ProtocolError& e) {
      if (e.code() != wire::ErrorCode::Timeout) throw;
      throw GroupUnlinked(addresses, fmt::format("the tensor group {} could not link: {}",
                                                 fmt::join(addresses, " + "), e.what()));
    }
  }
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

ClusterSupervisor::ClusterSupervisor(ClusterOptions options) : options_(std::move(options)) {
  for (const auto& address : options_.workers) {
    Member m;
    m.address = address;
    members_.push_back(std::move(m));
  }
}

// A discovered candidate that failed is tried again only this much later,
// and only while its beacons still come.
constexpr auto kDroppedRetry = std::chrono::seconds(30);
constexpr size_t kMaxAttempts = 16;

ClusterSupervisor::~ClusterSupervisor() {
  discovery_.reset();
  stop_ = true;
  if (keeper_.joinable()) keeper_.join();
  if (rejoiner_.joinable()) rejoiner_.join();
  std::lock_guard<std::mutex> lock(attempts_mutex_);
  for (auto& f : attempts_) f.wait();  // each ends within one handshake deadline
  if (options_.key) OPENSSL_cleanse(options_.key->data(), options_.key->size());
}

void ClusterSupervisor::connect_all() {
  if (options_.discover) {
    if (!options_.key) fail("--rpc auto needs the cluster key (--key-file or SHOAL_CLUSTER_KEY): beacons carry a tag made with it");
    discovery_ = std::make_unique<Discovery>(*options_.key, options_.beacon_port,
                                             [this](const std::string& a) { add_discovered(a); });
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.discover_wait_ms));
  }
  // Everyone named or heard so far, all at once.
  std::vector<Member*> to_try;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Member& m : members_)
      if (!m.client && !m.trying) {
        m.trying = true;
        to_try.push_back(&m);
      }
  }
  std::vector<std::pair<Member*, std::future<Attempt>>> tries;
  for (Member* m : to_try)
    tries.emplace_back(m, std::async(std::launch::async, [this, address = m->address] { return attempt(address); }));
  size_t heard = 0;
  for (auto& [m, f] : tries) {
    const Attempt a = f.get();
    if (m->discovered) {
      ++heard;
      if (!a.connected) spdlog::warn("discovered worker {} cannot be used: {}", m->address, a.why);
    } else if (a.refused) {
      // Named by the user and answering, but not as a worker of this
      // cluster: a mistake to say now, not to retry quietly.
      fail("{}", a.why);
    } else if (!a.connected) {
      spdlog::warn("worker {} is not reachable ({}): starting without it; it joins when it comes", m->address, a.why);
    }
  }
  if (options_.discover)
    spdlog::info("--rpc auto: {} worker(s) found in {:.1f} s", heard, options_.discover_wait_ms / 1000.0);
  keeper_ = std::thread([this] { keeper_loop(); });
  rejoiner_ = std::thread([this] { rejoin_loop(); });
}

ClusterSupervisor::Attempt ClusterSupervisor::attempt(const std::string& address) {
  Attempt a;
  std::shared_ptr<WorkerClient> client;
  try {
    client = std::make_shared<WorkerClient>(address, options_.link());
    a.connected = true;
  } catch (const wire::ProtocolError& e) {
    a.refused = true;
    a.why = e.what();
  } catch (const wire::LinkError& e) {
    a.refused = true;  // it took the connection, then failed or stalled the handshake
    a.why = e.what();
  } catch (const std::exception& e) {
    a.why = e.what();  // nobody there (yet)
  }
  bool joined = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Member* m = find(address);
    if (!m) return a;
    m->trying = false;
    if (m->client) return a;
    if (!client) {
      m->last_error = a.why;
      if (m->discovered && m->losses == 0) {
        // Heard but never a member: dropped until heard again, much later.
        m->state = MemberState::Dropped;
        m->next_try = Clock::now() + kDroppedRetry;
      } else {
        m->state = m->losses > 0 ? MemberState::Lost : MemberState::Unreachable;
        m->backoff_s = std::min(m->backoff_s * 2, 4.0);
        m->next_try = Clock::now() + std::chrono::milliseconds(static_cast<int>(m->backoff_s * 1000));
      }
      spdlog::debug("worker {} not joined: {}", address, a.why);
      return a;
    }
    m->client = client;
    m->last_error.clear();
    joined = builds_ > 0;  // after the first plan: taken in at the next re-plan
    m->state = joined ? MemberState::Rejoining : MemberState::Idle;
    if (joined) spdlog::warn("worker {} is {}; it joins at the next re-plan", address, m->losses ? "back" : "here");
  }
  if (joined) wake();
  return a;
}

void ClusterSupervisor::start_attempts(const std::vector<std::string>& addresses) {
  std::lock_guard<std::mutex> lock(attempts_mutex_);
  std::erase_if(attempts_, [](auto& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
  for (const auto& address : addresses) {
    if (attempts_.size() >= kMaxAttempts) {
      std::lock_guard<std::mutex> members(mutex_);
      if (Member* m = find(address)) m->trying = false;  // next round
      continue;
    }
    attempts_.push_back(std::async(std::launch::async, [this, address] { attempt(address); }));
  }
}

void ClusterSupervisor::add_discovered(const std::string& address) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Member* m = find(address)) {
    m->last_heard = Clock::now();
    return;
  }
  Member m;
  m.address = address;
  m.state = MemberState::Discovered;
  m.discovered = true;
  m.next_try = m.last_heard = Clock::now();
  members_.push_back(std::move(m));
}

void ClusterSupervisor::set_wake(std::function<void()> wake) {
  // Waits for a call in progress: once this returns with nullptr, the old
  // target (a Scheduler going away) is never called again.
  std::lock_guard<std::mutex> lock(wake_mutex_);
  wake_ = std::move(wake);
}

void ClusterSupervisor::wake() {
  std::lock_guard<std::mutex> lock(wake_mutex_);
  if (wake_) wake_();
}

ClusterSupervisor::Member* ClusterSupervisor::find(const std::string& address) {
  for (Member& m : members_)
    if (m.address == address) return &m;
  return nullptr;
}

void ClusterSupervisor::mark_lost(Member& m, const std::string& why) {
  if (!m.client) return;
  spdlog::warn("worker {} lost: {}", m.address, why);
  m.client->close();
  m.client.reset();
  m.state = MemberState::Lost;
  m.last_error = why;
  m.stage_ids.clear();
  ++m.losses;
  m.backoff_s = 0.25;
  m.next_try = Clock::now() + std::chrono::milliseconds(250);
  last_detect_unix_ = unix_now();
}

SupervisorStatus ClusterSupervisor::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SupervisorStatus s;
  for (const Member& m : members_) s.members.push_back({m.address, m.state, m.last_error, m.losses});
  s.replans = std::max(0, builds_ - 1);
  s.last_loss_unix = last_detect_unix_;
  s.last_recovery_seconds = last_recovery_seconds_;
  s.predicted = predicted_;
  s.predicted_token_ms = predicted_token_ms_;
  return s;
}

void ClusterSupervisor::check_alive() {
  std::vector<std::pair<std::string, std::shared_ptr<WorkerClient>>> alive;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Member& m : members_)
      if (m.client) alive.emplace_back(m.address, m.client);
  }
  for (auto& [address, client] : alive) {
    std::string why;
    try {
      {
        std::lock_guard<std::mutex> lease(client->io());
        client->connection().drain();  // answers to the failed step, if any
      }
      client->ping_ms();
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty()) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    if (Member* m = find(address); m && m->client == client) mark_lost(*m, why);
  }
}

void ClusterSupervisor::lose(const wire::LinkError& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  Member* m = find(e.peer());
  // Only the link that failed: the worker may have been reconnected since.
  if (m && m->client && (!e.link() || &m->client->connection() == e.link())) mark_lost(*m, e.what());
}

std::vector<std::unique_ptr<Stage>> ClusterSupervisor::rebuild(Engine& engine, const std::exception* cause) {
  const auto t0 = Clock::now();
  if (cause) {
    // A link error names its worker; anything else (an ERROR a worker sent
    // about a chain step) is found out by asking every worker.
    if (const auto* link = dynamic_cast<const wire::LinkError*>(cause)) lose(*link);
    check_alive();
  }
  // A worker may die while its new stage loads: then plan again without it.
  std::string last_failure;
  size_t n_members;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    n_members = members_.size();
  }
  for (size_t attempt = 0; attempt <= n_members; ++attempt) {
    try {
      auto stages = build_stages(engine);
      std::lock_guard<std::mutex> lock(mutex_);
      if (builds_++ > 0) {
        last_recovery_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
        spdlog::warn("cluster re-planned in {:.2f} s", last_recovery_seconds_);
      }
      return stages;
    } catch (const wire::LinkError& e) {
      lose(e);
      last_failure = e.what();
    } catch (const StageRefused& e) {
      // Plan without it; it is retried like a lost one.
      last_failure = e.what();
      std::lock_guard<std::mutex> lock(mutex_);
      if (Member* m = find(e.address); m && m->client.get() == e.client) mark_lost(*m, last_failure);
    }
  }
  throw StagesUnavailable(fmt::format("the cluster could not be rebuilt: {}", last_failure));
}

void ClusterSupervisor::warn_if_mixed(const std::vector<int>& computing, const PlanInput& input) {
  // Bits match a local run only when every device with layers computes as
  // the primary does: the same backend, the same SIMD target or GPU. A
  // tensor group's members compute rows of the same matrices, so one
  // member unlike the primary changes them too.
  if (warned_mixed_) return;
  const DeviceInfo& local = input.devices.front();
  for (int device : computing) {
    const DeviceInfo& d = input.devices.at(static_cast<size_t>(device));
    if (device == 0) continue;
    const bool same = d.kind == local.kind && (d.kind == "cpu" ? d.simd == local.simd || d.simd.empty()
                                                               : d.backend == local.backend);
    if (same) continue;
    spdlog::warn("{} runs its layers on {} ({}) and the primary on {} ({}): results are no longer bit-identical to a "
                 "local run, only within the cross-backend tolerance",
                 d.address, d.kind, d.kind == "cpu" ? d.simd : d.backend, local.kind,
                 local.kind == "cpu" ? local.simd : local.backend);
    warned_mixed_ = true;
    return;
  }
}

std::vector<std::unique_ptr<Stage>> ClusterSupervisor::build_stages(Engine& engine) {
  const ModelConfig& config = engine.config();
  const wire::WireDType dtype = wire::parse_wire_dtype(options_.wire_dtype);
  // Every CPU is timed on the model's own weights.
  const ProbeShape shape = probe_shape_for(engine.file(), config);
  if (!have_local_) {
    local_ = probe_local_cpu(engine.pool(), shape);
    local_.address = "local";
    if (Backend* gpu = engine.gpu_backend(); gpu && engine.gpu_begin() == 0) {
      // Every local layer runs on the GPU: its memory is what the primary
      // lends; its speed is not measured (the planner then splits by memory).
      local_.backend = gpu->name();
      local_.kind = kind_name(gpu->kind());
      local_.free_memory = gpu->free_memory();
      local_.matvec_gbps = local_.matmul_gflops = 0.0;
    }
    if (options_.local_mem > 0) local_.free_memory = std::min(local_.free_memory, options_.local_mem);
    have_local_ = true;
  }

  // Who takes part: the primary and every worker connected now, each with
  // the client it has now (other threads may lose or replace it meanwhile).
  Usable usable;
  size_t n_members = 0;
  std::vector<std::string> lost;
  PlanInput input = plan_input_for_model(engine.file(), config, engine.n_ctx(), engine.options().n_seq,
                                         engine.n_batch(), engine.options().kv_types, engine.rewind_rows(),
                                         engine.options().speculative.type == SpecType::Mtp);
  input.reserve_bytes = options_.reserve_bytes;
  input.split = options_.split;
  input.relay = options_.relay();
  input.devices.push_back(local_);
  // The last tensor group may run the output head (the cost model decides), but not when the
  // primary's head is a GPU (the local run's logits are that GPU's) or the logits are wider than a
  // FORWARD_RESULT may be.
  if (engine.head_backend().kind() != BackendKind::Cpu || config.n_vocab > static_cast<int>(wire::kMaxResultWidth))
    input.logit_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    n_members = members_.size();
    for (Member& m : members_) {
      if (m.client) {
        usable.emplace_back(&m, m.client);
      } else {
        lost.push_back(m.address);
      }
    }
  }
  // Outside the lock: a probe takes a fraction of a second.
  for (auto& [m, client] : usable) {
    client->probe(shape);
    input.devices.push_back(client->device());
  }
  // --tensor-split speaks of the devices the user listed; once one is gone
  // (or a discovered one came) the planner splits by memory again.
  if (usable.size() == options_.workers.size() && usable.size() == n_members)
    input.tensor_split = options_.tensor_split;
  Plan plan;
  try {
    plan = make_plan(input);
  } catch (const Error& e) {
    throw StagesUnavailable(fmt::format("the model does not fit on what is left of the cluster (lost: {}): {}",
                                        lost.empty() ? "none" : fmt::format("{}", fmt::join(lost, ", ")), e.what()));
  }
  // With two workers or more both splits are predicted and shown, whichever runs.
  if (options_.split_mode != SplitMode::layer || usable.size() >= 2) {
    const SplitChoice choice = choose_split(options_.split_mode, plan, input, options_.group_size);
    std::fprintf(stderr, "%s", format_split_choice(choice, input).c_str());
    if (choice.mode == SplitMode::tensor && unlinked(usable, choice.groups)) {
      spdlog::warn("the members of a tensor group could not link to each other when it was loaded: the layer split");
    } else if (choice.mode == SplitMode::tensor) {
      std::vector<int> computing;
      for (const std::vector<int>& group : choice.groups) computing.insert(computing.end(), group.begin(), group.end());
      warn_if_mixed(computing, input);
      if (!options_.prefill_on.empty())
        spdlog::warn("--prefill-on: a tensor group's members each hold a share of a layer's cache, which cannot be "
                     "moved to them; prompts run on the groups");
      try {
        return build_tensor_groups(engine, usable, choice);
      } catch (const GroupUnlinked& e) {
        spdlog::warn("{}; the layer split instead", e.what());
        unlinked_.push_back(e.members);
      }
    } else if (options_.split_mode == SplitMode::tensor) {
      spdlog::warn("{}", choice.reason);
    }
  }
  std::fprintf(stderr, "%s", format_plan(plan, input).c_str());
  std::vector<int> computing;
  for (const StageAssignment& a : plan.stages)
    if (a.layer_end > a.layer_begin) computing.push_back(a.device);
  warn_if_mixed(computing, input);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    predicted_.clear();
    for (const StageAssignment& a : plan.stages)
      if (a.layer_end > a.layer_begin)
        predicted_.push_back({input.devices[a.device].address, a.layer_begin, a.layer_end, a.predicted_ms});
    predicted_token_ms_ = plan.predicted_token_ms;
  }

  TensorHashes hashes(engine.file());
  std::vector<std::string> member_addresses;
  for (auto& [m, client] : usable) member_addresses.push_back(client->address());
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<RemoteMember> chain;  // consecutive remote stages waiting to become one chain
  Loaded loaded;
  auto flush_chain = [&] {
    if (chain.empty()) return;
    stages.push_back(
        std::make_unique<RemoteStage>(std::move(chain), config.n_embd, config.side_width(), config.n_layer, dtype));
    chain.clear();
  };
  for (const StageAssignment& a : plan.stages) {
    if (a.layer_begin == a.layer_end) continue;
    if (a.device == 0) {
      flush_chain();
      for (auto& s : engine.make_local_stages(a.layer_begin, a.layer_end)) stages.push_back(std::move(s));
      continue;
    }
    auto& [m, client] = usable[static_cast<size_t>(a.device - 1)];
    StageLoadReport r = load_on(engine, hashes, *m, client, a.layer_begin, a.layer_end, member_addresses, nullptr);
    loaded.emplace_back(m, client.get(), r.stage_id);
    RemoteMember member{client, r.stage_id, a.layer_begin, a.layer_end, r};
    if (!options_.chain) {
      stages.push_back(
          std::make_unique<RemoteStage>(std::vector<RemoteMember>{member}, config.n_embd, config.side_width(),
                                        config.n_layer, dtype));
    } else {
      chain.push_back(member);
    }
  }
  flush_chain();

  build_prompt_stages(engine, usable, plan, input, hashes, loaded);
  commit_stages(usable, loaded);
  return stages;
}

void ClusterSupervisor::build_prompt_stages(Engine& engine, const Usable& usable, const Plan& plan,
                                            const PlanInput& input, TensorHashes& hashes, Loaded& loaded) {
  prompt_stages_.clear();
  if (options_.prefill_on.empty()) return;
  const ModelConfig& config = engine.config();
  // The named workers as the plan's devices (from 1: usable's order); none with "auto".
  const bool automatic = options_.prefill_on == std::vector<std::string>{"auto"};
  std::vector<int> devices;
  for (const std::string& name : automatic ? std::vector<std::string>{} : options_.prefill_on) {
    if (name == "local") fail("--prefill-on local: prompts run on workers (name one of --rpc)");
    auto it = std::find_if(usable.begin(), usable.end(), [&](const auto& u) { return u.first->address == name; });
    if (it != usable.end()) {
      devices.push_back(static_cast<int>(it - usable.begin()) + 1);
    } else if (builds_ == 0 && std::find(options_.workers.begin(), options_.workers.end(), name) ==
                                   options_.workers.end()) {
      fail("--prefill-on {}: not one of the workers named with --rpc", name);
    } else {
      spdlog::warn("--prefill-on {}: not connected; prompts run without it", name);
    }
  }
  if (!automatic && devices.empty()) return;
  // The prompt's plan as `shoal plan` makes it (prompt_placement.h): the named workers split by memory, or
  // with auto the worker predicted best for a prompt of half the context.
  const RequestShape request{std::max(1, engine.n_ctx() / 2), 128};
  PromptPlacement placement;
  try {
    placement = choose_prompt_placement(plan, input, options_.relay(), request, devices, engine.n_batch(),
                                        engine.options().n_ubatch, 1);
  } catch (const Error& e) {
    if (builds_ == 0) throw;
    spdlog::warn("{}; prompts run on the plan's stages", e.what());
    return;
  }
  if (automatic) {
    if (!placement.split) {
      std::fprintf(stderr, "prompts: on the plan's stages (--prefill-on auto: no worker's prompts win by 10 %% for a "
                           "prompt of %d tokens)\n", request.prompt_tokens);
      return;
    }
    const auto on = std::find_if(placement.plan.stages.begin(), placement.plan.stages.end(),
                                 [](const StageAssignment& a) { return a.layer_end > a.layer_begin; });
    std::fprintf(stderr, "prompts: --prefill-on auto predicts %.2f s to the first token of a %d-token prompt on %s "
                         "against %.2f s on the plan's stages\n", placement.placed.prefill_ms / 1e3,
                 request.prompt_tokens, input.devices[on->device].address.c_str(), placement.joint.prefill_ms / 1e3);
  }
  const wire::WireDType dtype = wire::parse_wire_dtype(options_.wire_dtype);
  std::vector<std::unique_ptr<Stage>> stages;
  try {
    for (const StageAssignment& a : placement.plan.stages) {
      if (a.layer_end == a.layer_begin) continue;
      auto& [m, client] = usable.at(static_cast<size_t>(a.device - 1));
      StageLoadReport r = load_on(engine, hashes, *m, client, a.layer_begin, a.layer_end, {}, nullptr);
      loaded.emplace_back(m, client.get(), r.stage_id);
      stages.push_back(std::make_unique<RemoteStage>(
          std::vector<RemoteMember>{RemoteMember{client, r.stage_id, a.layer_begin, a.layer_end, r}}, config.n_embd,
          config.side_width(), config.n_layer, dtype));
      std::fprintf(stderr, "prompts on %s: layers %d-%d (the plan above decodes)\n", client->address().c_str(),
                   a.layer_begin, a.layer_end - 1);
    }
  } catch (const StageRefused& e) {
    // Forced at start: said, and the run does not start. Later: the run goes on without.
    if (builds_ == 0) fail("--prefill-on: {}", e.what());
    spdlog::warn("--prefill-on: {}; prompts run on the plan's stages", e.what());
    return;
  }
  prompt_stages_ = std::move(stages);
}

bool ClusterSupervisor::unlinked(const Usable& usable, const std::vector<std::vector<int>>& groups) const {
  for (const std::vector<int>& group : groups) {
    std::vector<std::string> addresses;
    for (int d : group) addresses.push_back(usable.at(static_cast<size_t>(d - 1)).second->address());
    std::sort(addresses.begin(), addresses.end());
    // A group holding every member of one that could not link holds its unreachable pair too.
    for (const std::vector<std::string>& failed : unlinked_)
      if (std::includes(addresses.begin(), addresses.end(), failed.begin(), failed.end())) return true;
  }
  return false;
}

StageLoadReport ClusterSupervisor::load_on(Engine& engine, TensorHashes& hashes, Member& m,
                                           const std::shared_ptr<WorkerClient>& client, int begin, int end,
                                           const std::vector<std::string>& member_addresses,
                                           const nlohmann::json& group, bool head) {
  ProgressBar bar(client->address());
  StageLoadReport r;
  try {
    r = client->load_stage(engine.file(), hashes, engine.config(), begin, end, engine.options().n_seq, engine.n_ctx(),
                           engine.n_batch(), engine.rewind_rows(), engine.options().kv_types, member_addresses,
                           [&](uint64_t sent, uint64_t total) {
                             bar.update(sent, total);
                             if (options_.on_progress) options_.on_progress(client->address(), sent, total);
                           },
                           group, head);
  } catch (const wire::ProtocolError& e) {
    throw StageRefused(m.address, client.get(),
                       fmt::format("{} refused layers {}-{}: {}", m.address, begin, end - 1, e.what()));
  }
  std::fprintf(stderr,
               "%s: layers %d-%d loaded in %.2f s: %.1f MiB sent (%d tensors), %d tensors from its cache, %d from "
               "its models dir, %d shared with what it held\n",
               client->address().c_str(), begin, end - 1, r.seconds, r.sent_bytes / 1048576.0, r.tensors_sent,
               r.from_cache, r.from_models_dir, r.from_memory);
  return r;
}

std::vector<std::unique_ptr<Stage>> ClusterSupervisor::build_tensor_groups(
    Engine& engine, const Usable& usable, const SplitChoice& choice) {
  const std::vector<std::vector<int>>& groups = choice.groups;
  const std::vector<std::vector<int>>& weights = choice.weights;
  const ModelConfig& config = engine.config();
  const wire::WireDType dtype = wire::parse_wire_dtype(options_.wire_dtype);
  std::vector<std::string> all;
  for (auto& [m, client] : usable) all.push_back(client->address());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    predicted_.clear();
    predicted_token_ms_ = 0;
  }
  TensorHashes hashes(engine.file());
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<std::vector<RemoteMember>> group_members;  // per group, for linking
  std::string head_on;  // the group that runs the output head, if one does
  Loaded loaded;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto [begin, end] = tensor_group_layers(config.n_layer, static_cast<int>(groups.size()), static_cast<int>(g));
    std::vector<std::string> addresses;
    for (int d : groups[g]) addresses.push_back(usable.at(static_cast<size_t>(d - 1)).second->address());
    const int k = static_cast<int>(addresses.size());
    // The last group runs the output head too when the prediction has it there, each member its
    // share of the vocabulary's rows.
    const bool head = choice.tensor.head_on_group && g + 1 == groups.size();
    std::fprintf(stderr, "split: tensor, layers %d-%d on %s%s\n", begin, end - 1,
                 fmt::format("{}", fmt::join(addresses, " + ")).c_str(),
                 k > 1 ? fmt::format(" ({}-way: a share of every matmul's rows, in proportion {})", k,
                                     fmt::join(weights.at(g), ":")).c_str()
                       : "");
    // A fresh name per group: a member's links are matched to this load only.
    const uint64_t group_id = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    std::vector<RemoteMember> members;
    for (int rank = 0; rank < k; ++rank) {
      auto& [m, client] = usable.at(static_cast<size_t>(groups[g][rank] - 1));
      const nlohmann::json group =
          k > 1 ? nlohmann::json{{"id", fmt::format("{:016x}", group_id)},
                                 {"rank", rank},
                                 {"members", addresses},
                                 {"weights", weights.at(g)}}
                : nlohmann::json(nullptr);
      StageLoadReport r = load_on(engine, hashes, *m, client, begin, end, all, group, head);
      loaded.emplace_back(m, client.get(), r.stage_id);
      members.push_back({client, r.stage_id, begin, end, r});
    }
    if (head) head_on = fmt::format("{}", fmt::join(addresses, " + "));
    group_members.push_back(members);
    stages.push_back(std::make_unique<RemoteStage>(std::move(members), config.n_embd, config.side_width(), config.n_layer,
                                                   dtype,
                                                   k > 1 ? RemoteStage::Topology::tensor_group
                                                         : RemoteStage::Topology::chain,
                                                   head ? config.n_vocab : 0));
  }
  // Every group links now, before any step: members that cannot reach each
  // other give the group up here (its stages unloaded) rather than failing
  // every step.
  try {
    for (const std::vector<RemoteMember>& members : group_members)
      if (members.size() > 1) link_group(members);
  } catch (...) {
    // Nothing of this plan stands: every stage it loaded goes (on the
    // workers still here), or they would hold their KV caches unused.
    for (const std::vector<RemoteMember>& members : group_members)
      for (const RemoteMember& m : members) {
        try {
          m.client->unload(m.stage_id);
        } catch (const std::exception&) {
          // A worker lost meanwhile dropped its stages with its session.
        }
      }
    throw;
  }
  std::fprintf(stderr, "%s\n",
               head_on.empty() ? "the output head on the primary"
                               : fmt::format("the output head on the group {} (the primary's for embeddings)", head_on)
                                     .c_str());
  commit_stages(usable, loaded);
  return stages;
}

void ClusterSupervisor::commit_stages(const Usable& usable, const Loaded& loaded) {
  // The new stages stand: the old ones go (their tensors stay where a new
  // stage shares them).
  std::vector<std::pair<std::shared_ptr<WorkerClient>, std::vector<uint32_t>>> to_unload;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [m, client] : usable) {
      if (m->client != client) continue;  // lost (or replaced) meanwhile: its old stages went with it
      to_unload.emplace_back(m->client, m->stage_ids);
      m->stage_ids.clear();
      m->state = MemberState::Idle;
    }
    for (auto& [m, client, id] : loaded) {
      if (m->client.get() != client) continue;
      m->stage_ids.push_back(id);
      m->state = MemberState::Active;
    }
  }
  for (auto& [client, ids] : to_unload)
    for (uint32_t id : ids) {
      try {
        client->unload(id);
      } catch (const std::exception& e) {
        spdlog::warn("{}: could not unload stage {}: {}", client->address(), id, e.what());
      }
    }
}

void ClusterSupervisor::keeper_loop() {
  const auto interval = std::chrono::milliseconds(std::max(50, options_.timeout_ms / 4));
  while (!stop_) {
    std::this_thread::sleep_for(interval / 2);
    std::vector<std::pair<std::string, std::shared_ptr<WorkerClient>>> alive;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Member& m : members_)
        if (m.client) alive.emplace_back(m.address, m.client);
    }
    for (auto& [address, client] : alive) {
      wire::Connection& conn = client->connection();
      conn.heartbeat_if_idle(interval);
      // An idle link is read here; during a step the engine thread reads it.
      std::unique_lock<std::mutex> lease(client->io(), std::try_to_lock);
      if (!lease.owns_lock()) continue;
      std::string why;
      try {
        conn.drain();
        const auto silent = Clock::now() - conn.last_received();
        if (silent > std::chrono::milliseconds(options_.timeout_ms))
          why = fmt::format("{} was silent for {:.1f} s (timeout)", address,
                            std::chrono::duration<double>(silent).count());
      } catch (const std::exception& e) {
        why = e.what();
      }
      lease.unlock();
      if (why.empty()) continue;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (Member* m = find(address); m && m->client == client) mark_lost(*m, why);
      }
      wake();  // re-plan now, not at the next request
    }
  }
}

void ClusterSupervisor::rejoin_loop() {
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<std::string> due;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto now = Clock::now();
      for (Member& m : members_) {
        if (m.client || m.trying || now < m.next_try) continue;
        // A dropped candidate only while its beacons still come.
        if (m.state == MemberState::Dropped && now - m.last_heard > kDroppedRetry) continue;
        m.trying = true;
        due.push_back(m.address);
      }
    }
    // Each on its own thread: one that stalls its handshake holds up nobody.
    if (!due.empty()) start_attempts(due);
  }
}

}  // namespace shoal
