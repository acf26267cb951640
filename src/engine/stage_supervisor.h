#pragma once
// Who rebuilds the stages when one fails. A cluster's stages can lose a
// worker; the Scheduler then asks the supervisor for a new set (re-planned
// over what is left), replays each active sequence's tokens into it and
// carries on. The engine knows only this interface: the cluster's
// supervisor (cluster/primary/supervisor.h) implements it.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/stage.h"
#include "util/error.h"

namespace shoal {

class Engine;

// What is left cannot hold the model now. The message names what is
// missing; requests end with it (HTTP 503) until a rebuild succeeds.
class StagesUnavailable : public Error {
 public:
  using Error::Error;
};

// Where a member of the cluster stands.
enum class MemberState {
  Idle,         // connected, no layers
  Active,       // connected, holding layers
  Rejoining,    // back after a loss, waiting for a quiet step to take layers
  Lost,         // was connected, is not
  Unreachable,  // named, never reached yet
  Discovered,   // heard from (a beacon), not yet tried
  Dropped,      // heard from, failed to join
};
// Its name in /v1/cluster and the metrics: "idle", "active", ...
const char* member_state_name(MemberState state);
// Whether the member is connected (counted up by the metrics).
inline bool member_connected(MemberState s) {
  return s == MemberState::Idle || s == MemberState::Active || s == MemberState::Rejoining;
}

// One member of the cluster as the supervisor sees it, for /v1/cluster.
struct MemberStatus {
  std::string address;
  MemberState state = MemberState::Idle;
  std::string last_error;   // why it was lost, if it was
  int losses = 0;
};

// What the plan predicted for one device's layers: a decode step's share,
// its hop to the primary included (cluster/primary/cost_model.h).
struct StagePrediction {
  std::string address;
  int layer_begin = 0;
  int layer_end = 0;
  double predicted_ms = 0.0;
};

struct SupervisorStatus {
  std::vector<MemberStatus> members;
  std::vector<StagePrediction> predicted;  // the current plan's devices with layers
  double predicted_token_ms = 0;            // the whole step, the head included
  int replans = 0;               // stage sets built after the first
  double last_loss_unix = 0;        // when the last loss was noticed (seconds since the epoch; 0: none)
  double last_recovery_seconds = 0; // the last rebuild: stages planned and loaded (the replay is the Scheduler's)
};

class StageSupervisor {
 public:
  virtual ~StageSupervisor() = default;
  // On the engine thread, between steps. `cause` is what failed (null: a
  // re-plan because the cluster changed, e.g. a worker came back). Returns
  // stages covering every layer, with empty KV caches; throws
  // StagesUnavailable when the model cannot be held.
  virtual std::vector<std::unique_ptr<Stage>> rebuild(Engine& engine, const std::exception* cause) = 0;
  // After rebuild(): the stages prompts run on where they have their own
  // (--prefill-on; engine/prompt_stages.h), covering every layer; none: none.
  virtual std::vector<std::unique_ptr<Stage>> take_prompt_stages() { return {}; }
  // `wake` is called, from any thread, when a rebuild is worth trying
  // (a lost worker answers again, a new one appeared).
  virtual void set_wake(std::function<void()> wake) = 0;
  virtual SupervisorStatus status() const = 0;
};

}  // namespace shoal
