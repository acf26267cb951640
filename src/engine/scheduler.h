#pragma once
// Continuous batching for `shoal serve`: one engine thread owns the
// pipeline; requests from any thread wait in a queue, take a free slot (a
// KV sequence in every stage, local and remote), and every step runs one
// forward with a row for each active slot — a chunk of prompt for slots in
// prefill, the last sampled token for slots in decode. A new request joins
// at the next step; a finished or cancelled one leaves at once.
//
// Because every op computes each row on its own, a request's tokens are the
// same bits whether it ran alone or batched with others.
//
// Callbacks (on_text, on_done, options.on_logits) run on the engine thread
// with no lock held, so they may call submit(), cancel() and stats(); they
// should return quickly (they hold up every other request) and not throw
// (an exception is logged and otherwise ignored).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/generator.h"
#include "model/batch.h"

namespace shoal {

struct RequestResult {
  std::vector<TokenId> tokens;  // generated, end token excluded
  std::string finish_reason;    // "stop", "length", "cancelled", "error" or "unavailable"
  std::string error;            // when finish_reason is "error" or "unavailable" (the cluster cannot hold the model)
  // The error is the request's own (its grammar past the work bound, a
  // logit_bias that bans every token): the engine is as sound as before.
  bool request_fault = false;
  std::string stop_string;      // the stop string that ended it ("stop" without one: an end token)
  int n_prompt = 0;
  int n_reused = 0;             // prompt tokens whose KV the slot already held
  double queue_seconds = 0.0;
  double prompt_seconds = 0.0;
  double generation_seconds = 0.0;
  std::vector<float> embedding;  // an embedding request's (options.pooling), L2-normalised (Rank: as it is)
  int drafted = 0;   // speculative guesses checked
  int accepted = 0;  // of which right
};

struct Request {
  std::vector<TokenId> prompt;
  GenerationOptions options;  // max_tokens, sampling, stop strings, ignore_eos, on_logits
  // On the engine thread, with each piece of released text (valid UTF-8);
  // returning false cancels the request (a client that went away).
  std::function<bool(std::string_view text)> on_text;
  // On the engine thread, exactly once, at the end (a rejected prompt's
  // too, just after submit; a request still running when the Scheduler is
  // destroyed gets "cancelled" from the destructor's join).
  std::function<void(const RequestResult&)> on_done;
};

// The stages were rebuilt (a re-plan after a loss or a rejoin) or could not
// be: what the server shows as ready or degraded.
struct ClusterEvent {
  bool available = true;
  std::string reason;           // why unavailable
  double rebuild_seconds = 0;   // new stages planned, loaded and every active sequence replayed
  int replayed_tokens = 0;
};

struct SchedulerStats {
  int slots = 0;
  int active = 0;
  int queued = 0;
  uint64_t requests = 0;      // finished
  uint64_t tokens_in = 0;     // prompt tokens processed (reused ones excluded)
  uint64_t tokens_out = 0;    // tokens generated
  double busy_seconds = 0.0;  // time inside forward passes
  uint64_t rebuilds = 0;      // stage sets rebuilt after a loss or a rejoin
  double last_rebuild_seconds = 0.0;  // detection to carrying on: re-plan, load, replay
  uint64_t drafted = 0;   // speculative guesses verified
  uint64_t accepted = 0;  // of which right
};

class Scheduler {
 public:
  explicit Scheduler(Engine& engine);  // slots = engine.options().n_seq
  ~Scheduler();                        // finishes nothing: cancels what is left, stops the thread

  // Thread-safe. Returns an id for cancel(). A prompt that is empty, does not
  // fit the context or holds a token outside the vocabulary is finished at
  // once (on the engine thread) with finish_reason "error".
  uint64_t submit(Request request);
  // Thread-safe; the request ends with "cancelled" at the next step.
  void cancel(uint64_t id);
  SchedulerStats stats() const;
  // Thread-safe: rebuild the stages between steps (the supervisor's wake:
  // a lost worker answers again, an idle link went silent).
  void request_rebuild();
  // Engine thread, after each rebuild; set before the first request.
  void set_cluster_observer(std::function<void(const ClusterEvent&)> observer) { observer_ = std::move(observer); }

 private:
  struct Slot;
  // Adds an embedding request's rows of this step (normed: the pipeline's
  // rows after the output norm); at the prompt's end, the pooled vector.
  void pool_rows(Slot& s, const float* normed);
  struct Queued {
    uint64_t id = 0;
    Request request;
    std::chrono::steady_clock::time_point submitted;
    std::string error;  // set: rejected at submit, finished with "error"
    bool unavailable = false;  // rejected because the cluster cannot hold the model now
  };
  void loop();
  void admit(Queued& q);                // into the best free slot (mutex_ held)
  void step();                          // one forward for every active slot
  // Speculative decoding: each slot in decode guesses its next tokens
  // (Slot::draft), all of them within `rows` rows with their last tokens.
  void make_drafts(int rows);
  void finish(Slot& slot, const char* reason, const std::string& error = {}, bool request_fault = false);
  void finish_unstarted(Queued& q, const char* reason);
  void fail_active(const std::string& message, const char* reason = "error");
  // A stage failed (cause) or the cluster changed (null): new stages with
  // every active sequence's tokens in them (Engine::rebuild_stages), and
  // the step goes on as if nothing happened. False: the cluster cannot hold
  // the model now (active requests end "unavailable").
  bool rebuild(std::exception_ptr cause);
  // What the slot's sequence holds, its pending cut applied.
  std::span<const TokenId> held(const Slot& s) const;

  Engine& engine_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  std::vector<uint64_t> cancelled_;
  std::vector<Queued> rejected_;  // to finish on the engine thread
  uint64_t next_id_ = 1;
  bool stop_ = false;
  bool rebuild_requested_ = false;
  std::chrono::steady_clock::time_point rebuild_requested_at_{};
  static constexpr std::chrono::seconds kQuietWait{20};
  std::string unavailable_;  // non-empty: requests are refused with it
  std::function<void(const ClusterEvent&)> observer_;
  SchedulerStats stats_;
  // Engine-thread only: reused every step so steady state does not allocate.
  Batch batch_;
  std::vector<DraftJob> draft_jobs_;
  std::vector<uint64_t> cancel_now_;
  std::vector<Queued> done_now_;  // cancelled while queued, or rejected
  size_t rotate_ = 0;             // first slot served this step (fairness)
  std::thread thread_;
};

}  // namespace shoal
