#include "engine/scheduler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/sequence_decoder.h"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// User callbacks must not take the engine thread down with them: a throwing
// on_text counts as a client that went away, a throwing on_done is logged.
template <typename Fn>
bool guarded(const char* name, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    spdlog::error("scheduler: {} threw: {}", name, e.what());
  } catch (...) {
    spdlog::error("scheduler: {} threw", name);
  }
  return false;
}

bool call_on_text(const Request& r, std::string_view text) {
  return !r.on_text || text.empty() || guarded("on_text", [&] { return r.on_text(text); });
}

void call_on_done(const Request& r, const RequestResult& result) {
  if (r.on_done) guarded("on_done", [&] {
      r.on_done(result);
      return true;
    });
}

}  // namespace

// One KV sequence and the request using it. Touched only by the engine
// thread (admit() runs there too, under the mutex).
struct Scheduler::Slot {
  int seq = 0;
  int cut_to = -1;  // >= 0: the sequence is cut to this many positions before the next forward
  bool active = false;
  bool cancel = false;
  uint64_t id = 0;
  Request request;
  std::optional<SequenceDecoder> decoder;  // refers to request.options
  size_t fed = 0;                          // prompt tokens in the KV
  int chunk = 0;                           // this step's rows
  int logits_row = -1;                     // this step's row among the logits
  int embed_row = -1, embed_rows = 0;      // an embedding request's rows among them this step
  std::vector<double> embed_sum;           // its pooled rows so far
  std::vector<TokenId> draft;              // this step's speculative guess, fed behind the last token
  bool more = false;                       // the decoder goes on after this step
  std::string failure;                     // the decoder threw this step
  RequestResult result;
  Clock::time_point started, prompt_done;

  bool prefilling() const { return fed < request.prompt.size(); }
  bool embeds() const { return request.options.pooling != Pooling::None; }
  // Whether prompt position `at` feeds the pooled vector (or, generating, the first sample).
  bool wants_row(size_t at) const {
    switch (request.options.pooling) {
      case Pooling::Mean: return true;
      case Pooling::Cls: return at == 0;
      default: return at + 1 == request.prompt.size();
    }
  }
};

Scheduler::Scheduler(Engine& engine) : engine_(engine) {
  const int n = engine.options().n_seq;
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Slot>();
    s->seq = i;
    s->draft.reserve(65);  // the most a guess may hold (--draft-max 64): no allocation per step
    slots_.push_back(std::move(s));
  }
  const auto rows = static_cast<size_t>(engine.pipeline().max_tokens());
  batch_.tokens.reserve(rows);
  batch_.positions.reserve(rows);
  batch_.seq_ids.reserve(rows);
  batch_.logits.reserve(rows);
  cancelled_.reserve(64);
  draft_jobs_.reserve(static_cast<size_t>(n));
  cancel_now_.reserve(64);
  done_now_.reserve(16);
  stats_.slots = n;
  if (StageSupervisor* sup = engine.supervisor()) sup->set_wake([this] { request_rebuild(); });
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  if (StageSupervisor* sup = engine_.supervisor()) sup->set_wake(nullptr);
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t Scheduler::submit(Request request) {
  // Checked here so a bad prompt never reaches a slot (an id outside the
  // vocabulary would read past the embedding table).
  std::string error;
  const int n_vocab = engine_.config().n_vocab;
  if (request.prompt.empty()) {
    error = "the prompt is empty (no tokens)";
  } else if (static_cast<int>(request.prompt.size()) >= engine_.n_ctx()) {
    error = fmt::format("the prompt has {} tokens, the context only {}", request.prompt.size(), engine_.n_ctx());
  } else {
    for (size_t i = 0; i < request.prompt.size(); ++i)
      if (request.prompt[i] < 0 || request.prompt[i] >= n_vocab) {
        error = fmt::format("prompt token {} is {}, outside the vocabulary of {}", i, request.prompt[i], n_vocab);
        break;
      }
  }
  uint64_t id;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
    Queued q{id, std::move(request), Clock::now(), std::move(error)};
    if (q.error.empty()) {
      queue_.push_back(std::move(q));
      stats_.queued = static_cast<int>(queue_.size());
    } else {
      rejected_.push_back(std::move(q));
    }
  }
  wake_.notify_one();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  {
    std::lock_guard lock(mutex_);
    cancelled_.push_back(id);
  }
  wake_.notify_one();
}

void Scheduler::request_rebuild() {
  {
    std::lock_guard lock(mutex_);
    if (!rebuild_requested_) rebuild_requested_at_ = Clock::now();
    rebuild_requested_ = true;
  }
  wake_.notify_one();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      // Sleep only when there is nothing to run or to answer.
      wake_.wait(lock, [&] {
        return stop_ || stats_.active > 0 || !queue_.empty() || !cancelled_.empty() || !rejected_.empty() ||
               rebuild_requested_;
      });
      if (stop_) break;
      // A change of membership (a worker back or new, or one gone quiet
      // between requests) re-plans at a quiet moment: running streams would
      // otherwise pause while the moved layers load and every one of them is
      // replayed. A stage that is really gone fails the next step and is
      // rebuilt at once; a busy server takes the newcomer within kQuietWait.
      if (rebuild_requested_ &&
          (stats_.active == 0 || Clock::now() - rebuild_requested_at_ > kQuietWait)) {
        rebuild_requested_ = false;
        lock.unlock();
        rebuild(nullptr);
        continue;
      }
      for (auto& q : rejected_) done_now_.push_back(std::move(q));
      rejected_.clear();
      cancel_now_.swap(cancelled_);
      for (uint64_t id : cancel_now_) {
        auto it = std::find_if(queue_.begin(), queue_.end(), [id](const Queued& q) { return q.id == id; });
        if (it != queue_.end()) {
          done_now_.push_back(std::move(*it));
          queue_.erase(it);
          continue;
        }
        for (auto& s : slots_)
          if (s->active && s->id == id) s->cancel = true;
        // Anything else already finished: nothing to do.
      }
      cancel_now_.clear();
      // While the cluster cannot hold the model, nothing waits for it.
      while (!unavailable_.empty() && !queue_.empty()) {
        queue_.front().error = unavailable_;
        queue_.front().unavailable = true;
        done_now_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      // Admission is first come, first served; each takes the free slot
      // whose KV shares the most with its prompt.
      while (!queue_.empty() && stats_.active < stats_.slots) {
        admit(queue_.front());
        queue_.pop_front();
      }
      stats_.queued = static_cast<int>(queue_.size());
    }
    for (auto& q : done_now_) finish_unstarted(q, q.error.empty() ? "cancelled" : q.unavailable ? "unavailable" : "error");
    done_now_.clear();
    for (auto& s : slots_) {
      if (!s->active) continue;
      if (s->cancel) {
        finish(*s, "cancelled");
      } else if (!s->decoder && !s->embeds()) {
        // Outside the lock: the sampler sizes its buffers to the vocabulary.
        s->decoder.emplace(engine_.tokenizer(), engine_.config().n_vocab, engine_.n_ctx(), s->request.options,
                           s->request.prompt);
      }
    }
    step();
  }

  // Stopping: everything still here ends as "cancelled" (rejected prompts
  // keep their "error"), so each on_done still runs exactly once.
  {
    std::lock_guard lock(mutex_);
    for (auto& q : rejected_) done_now_.push_back(std::move(q));
    for (auto& q : queue_) done_now_.push_back(std::move(q));
    rejected_.clear();
    queue_.clear();
    stats_.queued = 0;
  }
  for (auto& s : slots_)
    if (s->active) finish(*s, "cancelled");
  for (auto& q : done_now_) finish_unstarted(q, q.error.empty() ? "cancelled" : q.unavailable ? "unavailable" : "error");
  done_now_.clear();
}

std::span<const TokenId> Scheduler::held(const Slot& s) const {
  const std::span<const TokenId> all = engine_.pipeline().held(s.seq);
  return s.cut_to >= 0 ? all.first(std::min(all.size(), static_cast<size_t>(s.cut_to))) : all;
}

void Scheduler::admit(Queued& q) {
  Slot* best = nullptr;
  size_t best_reuse = 0;
  const int max_rollback = engine_.pipeline().max_rollback();
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (s.active) continue;
    // A match counts only if it covers half of the shorter of prompt and
    // cache: sharing just a BOS token must not win over an empty slot and
    // wipe a conversation that may come back.
    const std::span<const TokenId> h = held(s);
    size_t reuse = reusable_prefix(h, q.request.prompt, max_rollback);
    if (2 * reuse < std::min(h.size(), q.request.prompt.size())) reuse = 0;
    // On a tie, take the slot holding the least, for the same reason.
    if (!best || reuse > best_reuse || (reuse == best_reuse && h.size() < held(*best).size())) {
      best = &s;
      best_reuse = reuse;
    }
  }
  best_reuse = reusable_prefix(held(*best), q.request.prompt, max_rollback);  // all it shares
  // Mean and CLS pooling read the prompt's first rows again.
  const Pooling pooling = q.request.options.pooling;
  if (pooling == Pooling::Mean || pooling == Pooling::Cls) best_reuse = 0;
  Slot& s = *best;
  s.active = true;
  s.cancel = false;
  s.id = q.id;
  s.request = std::move(q.request);
  s.cut_to = static_cast<int>(best_reuse);  // done by the engine thread before the next forward, outside the lock
  s.fed = best_reuse;
  s.started = Clock::now();
  s.result = RequestResult{};
  s.result.n_prompt = static_cast<int>(s.request.prompt.size());
  s.result.n_reused = static_cast<int>(best_reuse);
  s.result.queue_seconds = seconds_between(q.submitted, s.started);
  ++stats_.active;
}

void Scheduler::step() {
  Pipeline& pipeline = engine_.pipeline();
  const size_t n = slots_.size();
  batch_.clear();
  int budget = pipeline.max_tokens();
  int n_logits = 0;
  int n_prefill = 0;
  bool keep_normed = false;
  for (auto& s : slots_) {
    s->chunk = 0;
    s->logits_row = -1;
    s->embed_row = -1;
    s->embed_rows = 0;
    if (s->active && s->prefilling()) ++n_prefill;
  }
  // Decode rows first: one row each keeps every generation flowing. The
  // starting slot rotates, so when slots outnumber the batch each waits its
  // turn, and one row stays for prompts so that they are not starved then.
  const int decode_budget = budget - (n_prefill > 0 && budget > 1 ? 1 : 0);
  // Guesses never take more than half the batch from prompts that wait.
  make_drafts(n_prefill > 0 ? std::max(decode_budget / 2, std::min(decode_budget, static_cast<int>(n))) : decode_budget);
  for (size_t k = 0, taken = 0; k < n && static_cast<int>(taken) < decode_budget; ++k) {
    Slot& s = *slots_[(rotate_ + k) % n];
    if (!s.active || s.prefilling()) continue;
    // The last token, then the guess behind it: each row's logits check the
    // token after it (SequenceDecoder::verify).
    batch_.add(s.decoder->last(), s.decoder->position(), s.seq, true);
    for (size_t j = 0; j < s.draft.size(); ++j)
      batch_.add(s.draft[j], s.decoder->position() + 1 + static_cast<int>(j), s.seq, true);
    s.chunk = 1 + static_cast<int>(s.draft.size());
    s.logits_row = n_logits;
    n_logits += s.chunk;
    taken += static_cast<size_t>(s.chunk);
    budget -= s.chunk;
  }
  // Prompt chunks share the rest evenly; a share a short prompt leaves
  // unused goes to the slots after it.
  for (size_t k = 0; k < n && budget > 0; ++k) {
    Slot& s = *slots_[(rotate_ + k) % n];
    if (!s.active || !s.prefilling()) continue;
    const auto& prompt = s.request.prompt;
    const int left = static_cast<int>(prompt.size() - s.fed);
    const int take = std::min({left, budget, std::max(1, budget / n_prefill)});
    --n_prefill;
    if (s.embeds()) s.embed_row = n_logits;
    for (int j = 0; j < take; ++j) {
      const size_t at = s.fed + static_cast<size_t>(j);
      const bool row = s.wants_row(at);
      batch_.add(prompt[at], static_cast<int>(at), s.seq, row);
      if (row && s.embeds()) {
        ++s.embed_rows;
        ++n_logits;
      }
    }
    s.chunk = take;
    if (s.embeds()) keep_normed = keep_normed || s.embed_rows > 0;
    else if (take == left) s.logits_row = n_logits++;
    budget -= take;
  }
  rotate_ = n ? (rotate_ + 1) % n : 0;
  if (batch_.size() == 0) return;

  const float* logits = nullptr;
  double busy = 0.0;
  try {
    for (auto& s : slots_)
      if (s->cut_to >= 0) {
        pipeline.truncate_sequence(s->seq, s->cut_to);
        s->cut_to = -1;
      }
    Drafter* drafter = engine_.drafter();
    batch_.all_rows = drafter && drafter->reads_hidden_rows();
    const auto t0 = Clock::now();
    logits = pipeline.forward(batch_, keep_normed);
    busy = seconds_between(t0, Clock::now());
    if (batch_.all_rows) drafter->see(batch_, pipeline.normed_rows());
  } catch (const std::exception& e) {
    spdlog::error("scheduler: forward failed: {}", e.what());
    // A cluster rebuilds its stages and this step runs again at the next
    // turn of the loop, the same bits as if nothing had happened.
    if (engine_.supervisor()) {
      rebuild(std::current_exception());
      return;
    }
    // Nobody's KV can be trusted, but the thread lives on to serve the
    // next requests.
    fail_active(e.what());
    return;
  }

  // Three passes so that the stats count this step's tokens before any
  // callback (which may read them) hears of them.
  const int n_vocab = engine_.config().n_vocab;
  const auto now = Clock::now();
  uint64_t tokens_in = 0, tokens_out = 0, drafted = 0, accepted = 0;
  for (auto& sp : slots_) {  // the KV now holds this step's rows (the pipeline recorded them)
    Slot& s = *sp;
    if (s.chunk == 0) continue;
    if (s.prefilling()) {
      s.fed += static_cast<size_t>(s.chunk);
      tokens_in += static_cast<uint64_t>(s.chunk);
      if (!s.prefilling()) {
        s.prompt_done = now;
        s.result.prompt_seconds = seconds_between(s.started, now);
      }
    }
  }
  for (auto& sp : slots_) {  // pool the rows of embedding requests; one done ends here
    Slot& s = *sp;
    if (s.chunk == 0 || !s.embeds()) continue;
    pool_rows(s, pipeline.normed());
    if (!s.prefilling()) finish(s, "stop");
  }
  for (auto& sp : slots_) {  // sample
    Slot& s = *sp;
    if (s.logits_row < 0) continue;
    try {
      const int before = s.decoder->n_generated();
      // A slot in prefill has no guess: verify() is then step().
      s.more = s.decoder->verify(logits + static_cast<size_t>(s.logits_row) * n_vocab, s.draft);
      // The rows behind a wrong guess are overwritten by the next step.
      pipeline.forget_after(s.seq, s.decoder->position());
      drafted += s.draft.size();
      accepted += static_cast<uint64_t>(s.decoder->accepted());
      s.result.drafted += static_cast<int>(s.draft.size());
      s.result.accepted += s.decoder->accepted();
      tokens_out += static_cast<uint64_t>(s.decoder->n_generated() - before);
    } catch (const std::exception& e) {
      s.more = false;
      s.failure = e.what();
    }
  }
  {
    std::lock_guard lock(mutex_);
    stats_.tokens_in += tokens_in;
    stats_.tokens_out += tokens_out;
    stats_.drafted += drafted;
    stats_.accepted += accepted;
    stats_.busy_seconds += busy;
  }
  for (auto& sp : slots_) {  // stream, and free the slots that ended
    Slot& s = *sp;
    if (s.logits_row < 0) continue;
    if (!s.failure.empty()) {
      finish(s, "error", s.failure, /*request_fault=*/true);  // only the sequence's own decoder throws here
    } else if (!call_on_text(s.request, s.decoder->text())) {
      finish(s, "cancelled");
    } else if (!s.more) {
      finish(s, s.decoder->finish_reason());
    }
  }
}

void Scheduler::make_drafts(int rows) {
  Drafter* drafter = engine_.drafter();
  draft_jobs_.clear();
  int n_decode = 0;
  for (auto& s : slots_) {
    s->draft.clear();
    if (s->active && !s->prefilling() && s->decoder) ++n_decode;
  }
  if (!drafter || n_decode == 0) return;
  // Each slot in decode gets an equal share of the rows, its last token first.
  const int share = rows / n_decode - 1;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.active || s.prefilling() || !s.decoder) continue;
    DraftJob job = s.decoder->draft_job(s.seq, engine_.options().speculative, share, s.draft);
    if (job.max > 0) draft_jobs_.push_back(job);
  }
  drafter->propose(draft_jobs_);
}

void Scheduler::pool_rows(Slot& s, const float* normed) {
  const size_t width = static_cast<size_t>(engine_.config().n_embd);
  if (s.embed_sum.size() != width) s.embed_sum.assign(width, 0.0);
  for (int r = 0; r < s.embed_rows; ++r) {
    const float* row = normed + static_cast<size_t>(s.embed_row + r) * width;
    for (size_t i = 0; i < width; ++i) s.embed_sum[i] += row[i];
  }
  if (s.prefilling()) return;
  if (s.request.options.pooling == Pooling::Rank) {  // the head reads the row as it is
    s.result.embedding.assign(s.embed_sum.begin(), s.embed_sum.end());
    s.embed_sum.clear();
    return;
  }
  // The sum of the rows (one for CLS and last) scaled to unit length, which
  // is the mean's direction too (llama-server normalises, Euclidean, by default).
  double norm = 0;
  for (double v : s.embed_sum) norm += v * v;
  norm = std::sqrt(norm);
  s.result.embedding.resize(width);
  for (size_t i = 0; i < width; ++i)
    s.result.embedding[i] = static_cast<float>(norm > 0 ? s.embed_sum[i] / norm : 0.0);
  s.embed_sum.clear();
}

void Scheduler::finish(Slot& s, const char* reason, const std::string& error, bool request_fault) {
  const auto now = Clock::now();
  RequestResult& r = s.result;
  r.finish_reason = reason;
  r.error = error;
  r.request_fault = request_fault;
  if (s.decoder) {
    const std::string_view why(reason);
    // A normal end releases what the streams held back; a cancelled or
    // failed request's client is not listening.
    if (why == "stop" || why == "length") call_on_text(s.request, s.decoder->flush());
    r.tokens.assign(s.decoder->generated().begin(), s.decoder->generated().end());
    r.stop_string = s.decoder->stop_string();
  }
  if (s.prefilling())
    r.prompt_seconds = seconds_between(s.started, now);
  else
    r.generation_seconds = seconds_between(s.prompt_done, now);
  {
    // Counted before on_done runs, so whoever it wakes sees the stats final.
    std::lock_guard lock(mutex_);
    ++stats_.requests;
    --stats_.active;
  }
  call_on_done(s.request, r);
  // Free the slot; what the sequence holds stays, for the next request's prefix reuse.
  s.decoder.reset();
  s.request = Request{};
  s.result = RequestResult{};
  s.embed_sum.clear();
  s.failure.clear();
  s.active = false;
  s.cancel = false;
}

void Scheduler::finish_unstarted(Queued& q, const char* reason) {
  RequestResult r;
  r.finish_reason = reason;
  r.error = q.error;
  r.n_prompt = static_cast<int>(q.request.prompt.size());
  r.queue_seconds = seconds_between(q.submitted, Clock::now());
  {
    std::lock_guard lock(mutex_);
    ++stats_.requests;
  }
  call_on_done(q.request, r);
}

bool Scheduler::rebuild(std::exception_ptr cause) {
  StageSupervisor* sup = engine_.supervisor();
  if (!sup) return true;
  {
    // This re-plan takes in every change known now.
    std::lock_guard lock(mutex_);
    rebuild_requested_ = false;
  }
  const auto t0 = Clock::now();
  std::string reason;
  // Each active sequence keeps what it holds (cut to its reused prefix if
  // it was admitted since the last step); the others start empty.
  const Pipeline::KeepPositions keep = [this](int seq) {
    const Slot& s = *slots_.at(static_cast<size_t>(seq));  // slot i holds sequence i
    return s.active ? static_cast<int>(held(s).size()) : 0;
  };
  try {
    ClusterEvent event;
    if (cause) {
      try {
        std::rethrow_exception(cause);
      } catch (const std::exception& e) {
        event.replayed_tokens = engine_.rebuild_stages(&e, keep).value_or(0);
      }
    } else {
      event.replayed_tokens = engine_.rebuild_stages(nullptr, keep).value_or(0);
    }
    for (auto& s : slots_) s->cut_to = -1;  // the replay kept what each needed
    event.rebuild_seconds = seconds_between(t0, Clock::now());
    {
      std::lock_guard lock(mutex_);
      unavailable_.clear();
      ++stats_.rebuilds;
      stats_.last_rebuild_seconds = event.rebuild_seconds;
    }
    spdlog::warn("scheduler: stages rebuilt, {} tokens replayed, {:.2f} s", event.replayed_tokens,
                 event.rebuild_seconds);
    if (observer_) guarded("observer", [&] {
        observer_(event);
        return true;
      });
    return true;
  } catch (const std::exception& e) {
    reason = e.what();
  }
  if (reason.empty()) reason = "the cluster kept failing while it was rebuilt";
  spdlog::error("scheduler: the model cannot be served now: {}", reason);
  {
    std::lock_guard lock(mutex_);
    unavailable_ = reason;
  }
  fail_active(reason, "unavailable");
  if (observer_) guarded("observer", [&] {
      observer_(ClusterEvent{false, reason, seconds_between(t0, Clock::now()), 0});
      return true;
    });
  return false;
}

void Scheduler::fail_active(const std::string& message, const char* reason) {
  for (auto& s : slots_) {
    if (s->active) finish(*s, reason, message);
    // What the stages hold is unknown now: the next request prefills from
    // scratch (admission cuts to the reused prefix, here none).
    s->cut_to = 0;
  }
}

}  // namespace shoal
