#pragma once
// One request's hand-over from the engine thread, which produces its text
// (Request::on_text) and its end (Request::on_done), to the HTTP thread that
// answers the client. Text piles up until the HTTP thread takes it, so a slow
// client never holds up the engine; a client that went away closes the
// channel, and the next on_text returns false, which frees the slot.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "engine/scheduler.h"

namespace shoal::server {

class RequestChannel {
 public:
  // Engine thread. Returns false once the consumer has closed the channel.
  bool push(std::string_view text) {
    std::lock_guard lock(mutex_);
    if (closed_) return false;
    pending_ += text;
    ready_.notify_all();
    return true;
  }
  // Engine thread: a generated token's log-probability (logprobs asked),
  // before its text.
  void push_logprob(TokenLogprob logprob) {
    std::lock_guard lock(mutex_);
    pending_logprobs_.push_back(std::move(logprob));
  }
  void finish(const RequestResult& result) {
    std::lock_guard lock(mutex_);
    result_ = result;
    done_ = true;
    ready_.notify_all();
  }

  // HTTP thread: what arrived since the last call, waiting up to `timeout`
  // for something. `done` means the request has ended and `text` is the
  // last of its text.
  struct Taken {
    std::string text;
    bool done = false;
    std::vector<TokenLogprob> logprobs;  // of the tokens since the last take (logprobs asked)
  };
  Taken take(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    ready_.wait_for(lock, timeout, [&] { return done_ || !pending_.empty(); });
    Taken t{std::move(pending_), done_, std::move(pending_logprobs_)};
    pending_.clear();
    pending_logprobs_.clear();
    return t;
  }
  // Waits up to `timeout` for the end; true once the request has ended.
  bool wait_done(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return ready_.wait_for(lock, timeout, [&] { return done_; });
  }
  // Waits for the end; returns all the text not taken before.
  std::string wait_all() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return done_; });
    return std::move(pending_);
  }
  // The client went away: on_text will say so to the engine.
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  bool done() const {
    std::lock_guard lock(mutex_);
    return done_;
  }
  // Valid once done.
  RequestResult result() const {
    std::lock_guard lock(mutex_);
    return result_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::string pending_;
  std::vector<TokenLogprob> pending_logprobs_;
  bool done_ = false;
  bool closed_ = false;
  RequestResult result_;
};

// A Scheduler request whose callbacks feed `channel`; `on_done` (if set)
// also runs on the engine thread at the end, before the channel is told.
inline Request channel_request(const std::shared_ptr<RequestChannel>& channel, std::vector<TokenId> prompt,
                               GenerationOptions options,
                               std::function<void(const RequestResult&)> on_done = {}) {
  Request r;
  r.prompt = std::move(prompt);
  r.options = std::move(options);
  r.on_text = [channel](std::string_view text) { return channel->push(text); };
  if (r.options.logprobs >= 0)
    r.options.on_logprob = [channel](const TokenLogprob& lp) { channel->push_logprob(lp); };
  r.on_done = [channel, on_done = std::move(on_done)](const RequestResult& result) {
    if (on_done) on_done(result);
    channel->finish(result);
  };
  return r;
}

}  // namespace shoal::server
