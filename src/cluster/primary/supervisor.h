#pragma once
// The cluster supervisor: keeps the workers, the plan and the stages, and
// keeps them healthy. It sends HEARTBEATs on idle links and reads theirs,
// so a stalled worker is noticed within --worker-timeout even between
// requests; on a loss it re-plans over what is left (the primary
// included), loads the moved layers (workers share what they already hold,
// then their caches, then the primary streams the rest) and hands the
// Scheduler new stages, which replays every active sequence into them. It
// keeps retrying lost workers with backoff; one that answers again is taken
// into the next re-plan.
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cluster/device_info.h"
#include "cluster/primary/cluster_stages.h"
#include "cluster/primary/discovery.h"
#include "cluster/primary/split_choice.h"
#include "cluster/primary/worker_client.h"
#include "engine/stage_supervisor.h"

namespace shoal {

class ClusterSupervisor : public StageSupervisor {
 public:
  explicit ClusterSupervisor(ClusterOptions options);
  ~ClusterSupervisor() override;

  // Connects to every worker at once (a stalled one costs one handshake
  // deadline, not one each). A named worker that cannot be reached is left
  // for the rejoin thread (the cluster starts without it, if what is left
  // holds the model); one that answers but fails its handshake is an error
  // naming it. With --rpc auto it first listens for beacons
  // (--discover-wait) and keeps listening after.
  void connect_all();
  std::vector<std::unique_ptr<Stage>> rebuild(Engine& engine, const std::exception* cause) override;
  std::vector<std::unique_ptr<Stage>> take_prompt_stages() override {
    std::vector<std::unique_ptr<Stage>> stages = std::move(prompt_stages_);
    prompt_stages_.clear();
    return stages;
  }
  void set_wake(std::function<void()> wake) override;
  SupervisorStatus status() const override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Member {
    std::string address;
    std::shared_ptr<WorkerClient> client;  // null while lost
    MemberState state = MemberState::Idle;
    std::string last_error;
    int losses = 0;
    std::vector<uint32_t> stage_ids;       // loaded on it for the current stages
    Clock::time_point next_try{};
    double backoff_s = 0.25;
    bool discovered = false;  // heard by its beacon, not named with --rpc
    bool trying = false;      // a connection attempt is running
    Clock::time_point last_heard{};
  };
  // What one connection attempt came to.
  struct Attempt {
    bool connected = false;
    bool refused = false;  // it answered but failed the handshake (or the link failed during it)
    std::string why;
  };
  // mutex_ held. Closes the link and schedules the first retry.
  void mark_lost(Member& m, const std::string& why);
  Member* find(const std::string& address);  // mutex_ held
  // The worker whose link failed is lost, if that link is still its own.
  void lose(const wire::LinkError& e);
  // A worker heard of by its beacon: tried by the rejoin thread, taken in
  // at the next re-plan.
  void add_discovered(const std::string& address);
  // One attempt to connect to a member, bounded by the handshake deadline;
  // the member records the outcome. Runs on its own thread.
  Attempt attempt(const std::string& address);
  // Starts attempt() on its own thread for each address (at most
  // kMaxAttempts in flight); finished ones are reaped.
  void start_attempts(const std::vector<std::string>& addresses);
  // Checks the members still thought alive (after a failure): a drain and a
  // PING each, within the timeout.
  void check_alive();
  std::vector<std::unique_ptr<Stage>> build_stages(Engine& engine);
  // The members taking part in a build, each with the client it has now.
  using Usable = std::vector<std::pair<Member*, std::shared_ptr<WorkerClient>>>;
  using Loaded = std::vector<std::tuple<Member*, const WorkerClient*, uint32_t>>;
  // -sm tensor: the layers evenly over the groups (indices into usable, from 1), each group one stage.
  // choice: its groups, their members' share weights and whether the last runs the head.
  std::vector<std::unique_ptr<Stage>> build_tensor_groups(Engine& engine, const Usable& usable,
                                                          const SplitChoice& choice);
  // A group whose members could not link to each other at load (the
  // members' addresses, sorted): -sm tensor/auto plans the layers instead
  // whenever a group would hold all of them again.
  bool unlinked(const Usable& usable, const std::vector<std::vector<int>>& groups) const;
  std::vector<std::vector<std::string>> unlinked_;
  // --prefill-on: every layer on the named workers (split by their memory),
  // or with "auto" on the worker the cost model predicts best for a prompt
  // of half the context (prompt_placement.h), if any; each a star stage,
  // into prompt_stages_; their stage ids into `loaded`.
  void build_prompt_stages(Engine& engine, const Usable& usable, const Plan& plan, const PlanInput& input,
                           TensorHashes& hashes, Loaded& loaded);
  std::vector<std::unique_ptr<Stage>> prompt_stages_;
  // LOAD_STAGE on one worker, its progress drawn; a refusal is StageRefused.
  StageLoadReport load_on(Engine& engine, TensorHashes& hashes, Member& m, const std::shared_ptr<WorkerClient>& client,
                          int begin, int end, const std::vector<std::string>& member_addresses,
                          const nlohmann::json& group, bool head = false);
  // The loaded stages become the members' current ones; the old ones are unloaded.
  void commit_stages(const Usable& usable, const Loaded& loaded);
  // Once: a device with layers (`computing`: indices into input.devices)
  // computes differently from the primary.
  void warn_if_mixed(const std::vector<int>& computing, const PlanInput& input);
  void keeper_loop();
  void rejoin_loop();
  void wake();

  ClusterOptions options_;
  mutable std::mutex mutex_;
  std::deque<Member> members_;  // a deque: rebuild() holds pointers while discovery adds
  std::mutex wake_mutex_;  // guards wake_ and each call of it (never held with mutex_)
  std::function<void()> wake_;
  bool have_local_ = false;
  bool warned_mixed_ = false;
  DeviceInfo local_;
  int builds_ = 0;
  double last_detect_unix_ = 0, last_recovery_seconds_ = 0;
  std::vector<StagePrediction> predicted_;  // the last plan's, for status()
  double predicted_token_ms_ = 0;
  std::atomic<bool> stop_{false};
  std::thread keeper_, rejoiner_;
  std::mutex attempts_mutex_;
  std::vector<std::future<void>> attempts_;
  std::unique_ptr<Discovery> discovery_;  // last: it calls add_discovered until it is gone
};

}  // namespace shoal
