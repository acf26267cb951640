// Continuous batching: a request's tokens must be exactly those of the same
// prompt run alone through Generator (docs/design.md: the same bits for any batch
// composition), whatever else shares its steps. Waits are bounded condition
// variable waits on on_done, never sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "engine/generator.h"
#include "engine/scheduler.h"
#include "model_test_support.h"
#include "util/error.h"

namespace shoal::testing {
namespace {

constexpr auto kWait = std::chrono::seconds(60);

std::string stories() { return test_data_dir() + "/models/stories260K.gguf"; }

std::vector<std::string> models() {
  std::vector<std::string> m = {stories()};
  std::string smol = models_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (file_exists(smol)) m.push_back(smol);
  return m;
}

GenerationOptions greedy(int max_tokens, bool ignore_eos = false) {
  GenerationOptions o;
  o.max_tokens = max_tokens;
  o.sampling.temperature = 0.0f;
  o.ignore_eos = ignore_eos;
  return o;
}

struct Outcome {
  RequestResult result;
  std::string text;
  int done_calls = 0;
};

// Collects what every request streams and how it ends.
class Tracker {
 public:
  using Hook = std::function<bool(std::string_view)>;

  Request make(int key, std::vector<TokenId> prompt, const GenerationOptions& options, Hook hook = {}) {
    Request r;
    r.prompt = std::move(prompt);
    r.options = options;
    r.on_text = [this, key, hook](std::string_view text) {
      {
        std::lock_guard lock(mutex_);
        out_[key].text += text;
      }
      return hook ? hook(text) : true;
    };
    r.on_done = [this, key](const RequestResult& result) {
      std::lock_guard lock(mutex_);
      out_[key].result = result;
      ++out_[key].done_calls;
      ++done_;
      cv_.notify_all();
    };
    return r;
  }
  bool wait(int n) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, kWait, [&] { return done_ >= n; });
  }
  Outcome get(int key) {
    std::lock_guard lock(mutex_);
    return out_[key];
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int, Outcome> out_;
  int done_ = 0;
};

struct Solo {
  std::vector<TokenId> tokens;
  std::string text;
  std::string finish_reason;
};

// The reference: the prompt alone on a 1-slot engine.
Solo run_solo(Engine& e, const std::vector<TokenId>& prompt, const GenerationOptions& options) {
  Generator g(e.pipeline(), e.tokenizer(), e.n_ctx());
  Solo s;
  auto r = g.generate(prompt, options, [&](const std::string& t) {
    s.text += t;
    return true;
  });
  s.tokens = r.tokens;
  s.finish_reason = r.finish_reason;
  return s;
}

void expect_matches_solo(const Outcome& o, const Solo& s) {
  EXPECT_EQ(o.done_calls, 1);
  EXPECT_EQ(o.result.tokens, s.tokens);
  EXPECT_EQ(o.text, s.text);
  EXPECT_EQ(o.result.finish_reason, s.finish_reason);
}

const std::vector<std::string> kPrompts = {
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily who loved to play outside",
    "The little dog ran to the park",
    "Tom and Sue went to the beach. They saw a big red boat and",
    "One day, a bird",
    "The sun was hot and the children wanted ice cream, so they asked their mom if",
    "Max",
    "Lily found a shiny key under the old tree in the garden. She wondered what it could open, so she",
};

// One thread per engine in these tests: the machines running them are
// shared, and the result does not depend on the thread count anyway.
TEST(Scheduler, BatchedRequestsMatchSoloRuns) {
  for (const auto& path : models()) {
    SCOPED_TRACE(path);
    const bool small = path == stories();
    auto solo = load_engine(path, 1, 64, 1, 256);
    const Tokenizer& tok = solo->tokenizer();
    std::vector<std::vector<TokenId>> prompts;
    std::vector<GenerationOptions> options;
    std::vector<Solo> expected;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      prompts.push_back(tok.encode(kPrompts[i], true, false));
      GenerationOptions o = greedy(small ? 24 + 4 * static_cast<int>(i) : 8, i % 3 == 0);
      if (i % 4 == 1) {  // seeded sampling and penalties are per-slot state too
        o.sampling.temperature = 0.8f;
        o.sampling.seed = 1234 + i;
        o.sampling.repeat_penalty = 1.1f;
      }
      options.push_back(o);
      expected.push_back(run_solo(*solo, prompts[i], o));
    }
    // n_batch 8: prompts prefill in several chunks while others decode;
    // 3: fewer rows than slots, so decode rows take turns too.
    for (int n_batch : small ? std::vector<int>{64, 8, 3} : std::vector<int>{64, 8}) {
      SCOPED_TRACE("n_batch " + std::to_string(n_batch));
      auto batched = load_engine(path, 1, n_batch, 4, 256);
      Tracker tracker;
      Scheduler scheduler(*batched);
      for (size_t i = 0; i < prompts.size(); ++i)
        scheduler.submit(tracker.make(static_cast<int>(i), prompts[i], options[i]));
      ASSERT_TRUE(tracker.wait(static_cast<int>(prompts.size())));

      uint64_t in = 0, out = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        SCOPED_TRACE(kPrompts[i]);
        const Outcome o = tracker.get(static_cast<int>(i));
        expect_matches_solo(o, expected[i]);
        EXPECT_EQ(o.result.n_prompt, static_cast<int>(prompts[i].size()));
        EXPECT_GE(o.result.queue_seconds, 0.0);
        EXPECT_GT(o.result.prompt_seconds, 0.0);
        in += static_cast<uint64_t>(o.result.n_prompt - o.result.n_reused);
        out += o.result.tokens.size();
      }
      const SchedulerStats st = scheduler.stats();
      EXPECT_EQ(st.slots, 4);
      EXPECT_EQ(st.active, 0);
      EXPECT_EQ(st.queued, 0);
      EXPECT_EQ(st.requests, prompts.size());
      EXPECT_EQ(st.tokens_in, in);
      EXPECT_EQ(st.tokens_out, out);
      EXPECT_GT(st.busy_seconds, 0.0);
    }
  }
}

TEST(Scheduler, RequestJoiningMidGenerationMatchesSolo) {
  auto solo = load_engine(stories(), 1, 64, 1, 256);
  auto batched = load_engine(stories(), 1, 8, 2, 256);
  const Tokenizer& tok = solo->tokenizer();
  const auto a = tok.encode(kPrompts[1], true, false);
  const auto b = tok.encode(kPrompts[7], true, false);
  ASSERT_GT(b.size(), 16u);  // prefills in several chunks beside A's decode rows
  const GenerationOptions oa = greedy(48, true), ob = greedy(8, true);
  Tracker tracker;
  Scheduler scheduler(*batched);
  std::mutex order_mutex;
  std::vector<int> order;  // keys in the order they finished
  int pieces = 0;
  auto record = [&](int key) {
    std::lock_guard lock(order_mutex);
    order.push_back(key);
  };
  // B is submitted from A's own callback, so it surely joins mid-generation.
  Request ra = tracker.make(0, a, oa, [&](std::string_view) {
    if (++pieces == 4) {
      Request rb = tracker.make(1, b, ob);
      auto done = rb.on_done;
      rb.on_done = [&, done](const RequestResult& r) {
        record(1);
        done(r);
      };
      scheduler.submit(std::move(rb));
    }
    return true;
  });
  auto done_a = ra.on_done;
  ra.on_done = [&, done_a](const RequestResult& r) {
    record(0);
    done_a(r);
  };
  scheduler.submit(std::move(ra));
  ASSERT_TRUE(tracker.wait(2));
  expect_matches_solo(tracker.get(0), run_solo(*solo, a, oa));
  expect_matches_solo(tracker.get(1), run_solo(*solo, b, ob));
  EXPECT_EQ(order, (std::vector<int>{1, 0})) << "B should finish while A is still generating";
}

TEST(Scheduler, CancelAndClientGoneFreeTheSlot) {
  auto solo = load_engine(stories(), 1, 64, 1, 256);
  auto engine = load_engine(stories(), 1, 16, 1, 256);  // one slot: everything else queues
  const Tokenizer& tok = solo->tokenizer();
  const auto pa = tok.encode(kPrompts[0], true, false);
  const auto pb = tok.encode(kPrompts[2], true, false);
  Tracker tracker;
  Scheduler scheduler(*engine);

  // A blocks the engine thread in its first on_text until the test has
  // queued and cancelled what it wants: no timing luck involved.
  std::mutex gate_mutex;
  std::condition_variable gate_cv;
  bool started = false, open = false;
  const uint64_t id_a = scheduler.submit(tracker.make(0, pa, greedy(-1, true), [&](std::string_view) {
    std::unique_lock lock(gate_mutex);
    if (!started) {
      started = true;
      gate_cv.notify_all();
      gate_cv.wait_for(lock, kWait, [&] { return open; });
    }
    return true;
  }));
  {
    std::unique_lock lock(gate_mutex);
    ASSERT_TRUE(gate_cv.wait_for(lock, kWait, [&] { return started; }));
  }
  const uint64_t id_e = scheduler.submit(tracker.make(1, pb, greedy(8)));  // queued, then cancelled
  scheduler.cancel(id_e);
  scheduler.submit(tracker.make(2, pb, greedy(12)));  // runs once A is gone
  scheduler.cancel(id_a);
  scheduler.cancel(999999);  // unknown ids are ignored
  {
    std::lock_guard lock(gate_mutex);
    open = true;
  }
  gate_cv.notify_all();
  ASSERT_TRUE(tracker.wait(3));
  const Outcome oa = tracker.get(0), oe = tracker.get(1);
  EXPECT_EQ(oa.result.finish_reason, "cancelled");
  EXPECT_GE(oa.result.tokens.size(), 1u);
  EXPECT_EQ(oe.result.finish_reason, "cancelled");
  EXPECT_TRUE(oe.result.tokens.empty());
  EXPECT_EQ(oe.done_calls, 1);
  expect_matches_solo(tracker.get(2), run_solo(*solo, pb, greedy(12)));

  // A client that goes away (on_text false) ends its request the same way.
  scheduler.submit(tracker.make(3, pa, greedy(20, true), [](std::string_view) { return false; }));
  scheduler.submit(tracker.make(4, pa, greedy(6)));
  ASSERT_TRUE(tracker.wait(5));
  const Outcome oc = tracker.get(3);
  EXPECT_EQ(oc.result.finish_reason, "cancelled");
  EXPECT_GE(oc.result.tokens.size(), 1u);
  EXPECT_LT(oc.result.tokens.size(), 20u);
  expect_matches_solo(tracker.get(4), run_solo(*solo, pa, greedy(6)));
  EXPECT_EQ(scheduler.stats().requests, 5u);
}

TEST(Scheduler, StopStringsAndTokenLimit) {
  auto solo = load_engine(stories(), 1, 64, 1, 256);
  auto engine = load_engine(stories(), 1, 64, 2, 256);
  const auto prompt = solo->tokenizer().encode(kPrompts[3], true, false);
  const Solo free_run = run_solo(*solo, prompt, greedy(40, true));
  ASSERT_GT(free_run.text.size(), 20u);
  // A stop string from the middle of what the model says anyway.
  const std::string stop = free_run.text.substr(free_run.text.size() / 2, 3);
  const size_t at = free_run.text.find(stop);
  GenerationOptions with_stop = greedy(40, true);
  with_stop.stop = {stop};

  Tracker tracker;
  Scheduler scheduler(*engine);
  scheduler.submit(tracker.make(0, prompt, with_stop));
  scheduler.submit(tracker.make(1, prompt, greedy(5, true)));
  scheduler.submit(tracker.make(2, prompt, greedy(0, true)));
  ASSERT_TRUE(tracker.wait(3));
  const Outcome os = tracker.get(0);
  EXPECT_EQ(os.result.finish_reason, "stop");
  EXPECT_EQ(os.text, free_run.text.substr(0, at)) << "stop string '" << stop << "'";
  expect_matches_solo(os, run_solo(*solo, prompt, with_stop));
  const Outcome ol = tracker.get(1);
  EXPECT_EQ(ol.result.finish_reason, "length");
  EXPECT_EQ(ol.result.tokens, std::vector<TokenId>(free_run.tokens.begin(), free_run.tokens.begin() + 5));
  const Outcome oz = tracker.get(2);
  EXPECT_EQ(oz.result.finish_reason, "length");
  EXPECT_TRUE(oz.result.tokens.empty());
}

TEST(Scheduler, PrefixReuseKeepsTheConversationsSlot) {
  auto solo = load_engine(stories(), 1, 64, 1, 256);
  auto engine = load_engine(stories(), 1, 64, 2, 256);
  const Tokenizer& tok = solo->tokenizer();
  const auto first = tok.encode(kPrompts[5], true, false);
  Tracker tracker;
  Scheduler scheduler(*engine);
  scheduler.submit(tracker.make(0, first, greedy(16, true)));
  ASSERT_TRUE(tracker.wait(1));
  const auto answer = tracker.get(0).result.tokens;
  ASSERT_EQ(answer.size(), 16u);

  // An unrelated request (sharing only BOS) takes the empty slot and leaves
  // the conversation's KV alone.
  scheduler.submit(tracker.make(1, tok.encode("The cat sat", true, false), greedy(8)));
  ASSERT_TRUE(tracker.wait(2));
  EXPECT_EQ(tracker.get(1).result.n_reused, 0);

  // The next turn: prompt + answer + more. The last answer token was never
  // fed (generation stopped at the limit), so everything before it is reused.
  std::vector<TokenId> next = first;
  next.insert(next.end(), answer.begin(), answer.end());
  const auto more = tok.encode(" Then they went home and", false, false);
  next.insert(next.end(), more.begin(), more.end());
  scheduler.submit(tracker.make(2, next, greedy(12)));
  ASSERT_TRUE(tracker.wait(3));
  const Outcome o = tracker.get(2);
  EXPECT_EQ(o.result.n_reused, static_cast<int>(first.size() + answer.size() - 1));
  expect_matches_solo(o, run_solo(*solo, next, greedy(12)));
  EXPECT_EQ(scheduler.stats().tokens_in,
            first.size() + tracker.get(1).result.n_prompt + next.size() - static_cast<size_t>(o.result.n_reused));
}

TEST(Scheduler, BadPromptsFinishWithError) {
  auto solo = load_engine(stories(), 1, 64, 1, 32);
  auto engine = load_engine(stories(), 1, 64, 2, 32);
  const int n_vocab = engine->config().n_vocab;
  Tracker tracker;
  Scheduler scheduler(*engine);
  scheduler.submit(tracker.make(0, std::vector<TokenId>(32, 100), greedy(4)));  // = n_ctx: no room to generate
  scheduler.submit(tracker.make(1, {}, greedy(4)));
  scheduler.submit(tracker.make(2, {1, n_vocab}, greedy(4)));
  const auto ok = engine->tokenizer().encode(kPrompts[4], true, false);
  scheduler.submit(tracker.make(3, ok, greedy(8)));
  ASSERT_TRUE(tracker.wait(4));
  for (int k = 0; k < 3; ++k) {
    const Outcome o = tracker.get(k);
    EXPECT_EQ(o.result.finish_reason, "error") << k;
    EXPECT_FALSE(o.result.error.empty()) << k;
    EXPECT_EQ(o.done_calls, 1);
  }
  EXPECT_NE(tracker.get(0).result.error.find("context"), std::string::npos) << tracker.get(0).result.error;
  expect_matches_solo(tracker.get(3), run_solo(*solo, ok, greedy(8)));
}

// A stage that fails on demand, like a remote worker that died.
class FlakyStage : public Stage {
 public:
  FlakyStage(std::unique_ptr<Stage> inner, std::atomic<bool>& broken) : inner_(std::move(inner)), broken_(broken) {}
  int layer_begin() const override { return inner_->layer_begin(); }
  int layer_end() const override { return inner_->layer_end(); }
  std::string describe() const override { return "flaky " + inner_->describe(); }
  std::vector<StageDevice> devices() const override { return inner_->devices(); }
  void forward(const Batch& batch, float* hidden) override {
    if (broken_) fail("worker lost");
    inner_->forward(batch, hidden);
  }
  void truncate_sequence(int seq, int n_pos) override { inner_->truncate_sequence(seq, n_pos); }

 private:
  std::unique_ptr<Stage> inner_;
  std::atomic<bool>& broken_;
};

TEST(Scheduler, ForwardFailureFailsActiveRequestsAndKeepsServing) {
  auto solo = load_engine(stories(), 1, 64, 1, 256);
  std::atomic<bool> broken{false};
  EngineOptions eo;
  eo.model_path = stories();
  eo.threads = 1;
  eo.n_batch = 16;
  eo.n_seq = 2;
  eo.n_ctx = 256;
  Engine engine(eo, [&](Engine& e) {
    std::vector<std::unique_ptr<Stage>> stages;
    stages.push_back(std::make_unique<FlakyStage>(e.make_local_stage(0, e.config().n_layer), broken));
    return stages;
  });
  const Tokenizer& tok = solo->tokenizer();
  const auto pa = tok.encode(kPrompts[1], true, false), pb = tok.encode(kPrompts[6], true, false);
  Tracker tracker;
  Scheduler scheduler(engine);
  int pieces = 0;
  // The stage breaks while A and B are both generating.
  scheduler.submit(tracker.make(0, pa, greedy(40, true), [&](std::string_view) {
    if (++pieces == 3) broken = true;
    return true;
  }));
  scheduler.submit(tracker.make(1, pb, greedy(40, true)));
  ASSERT_TRUE(tracker.wait(2));
  for (int k = 0; k < 2; ++k) {
    const Outcome o = tracker.get(k);
    EXPECT_EQ(o.result.finish_reason, "error");
    EXPECT_EQ(o.result.error, "worker lost");
    EXPECT_LT(o.result.tokens.size(), 40u);
  }
  // Repaired: the thread still serves, and prefills from scratch since the
  // KV after a failure cannot be trusted.
  broken = false;
  scheduler.submit(tracker.make(2, pa, greedy(12)));
  ASSERT_TRUE(tracker.wait(3));
  EXPECT_EQ(tracker.get(2).result.n_reused, 0);
  expect_matches_solo(tracker.get(2), run_solo(*solo, pa, greedy(12)));
}

TEST(Scheduler, DestructorCancelsWhatIsLeft) {
  auto engine = load_engine(stories(), 1, 64, 1, 256);
  const auto prompt = engine->tokenizer().encode(kPrompts[0], true, false);
  Tracker tracker;
  {
    Scheduler scheduler(*engine);
    for (int k = 0; k < 3; ++k) scheduler.submit(tracker.make(k, prompt, greedy(-1, true)));
  }
  ASSERT_TRUE(tracker.wait(3));  // each on_done ran exactly once before the join returned
  int cancelled = 0;
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(tracker.get(k).done_calls, 1);
    cancelled += tracker.get(k).result.finish_reason == "cancelled";
  }
  // Three runs to the context end take far longer than the destructor's
  // wait for one step, so at least the last one never ran.
  EXPECT_GE(cancelled, 1);
}

}  // namespace
}  // namespace shoal::testing
