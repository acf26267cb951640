// Speculative decoding: a guess changes how many tokens a step yields, never
// which. Greedy and seeded sampling give exactly the tokens of plain
// decoding, for every architecture, through Generator and the Scheduler;
// the tokens drawn from verification rows follow the target's distribution
// (a chi-square test on a small vocabulary).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>

#include "engine/generator.h"
#include "engine/model_drafter.h"
#include "engine/ngram_drafter.h"
#include "engine/scheduler.h"
#include "engine/sequence_decoder.h"
#include "model_test_support.h"
#include "util/error.h"

namespace shoal::testing {
namespace {

std::string stories() { return test_data_dir() + "/models/stories260K.gguf"; }

std::unique_ptr<Engine> spec_engine(const std::string& path, SpecType type, const std::string& draft = {},
                                    int n_seq = 1, int draft_max = 6) {
  EngineOptions o;
  o.model_path = path;
  o.threads = 1;
  o.n_batch = 64;
  o.n_seq = n_seq;
  o.n_ctx = 256;
  o.speculative.type = type;
  o.speculative.draft_model = draft;
  o.speculative.draft_max = draft_max;
  o.speculative.draft_p_min = 0.0f;  // the draft guesses its whole window: every row is checked
  return std::make_unique<Engine>(o);
}

struct Outcome {
  std::vector<TokenId> tokens;
  std::string text;
  int drafted = 0, accepted = 0;
};

Outcome generate(Engine& e, const std::vector<TokenId>& prompt, const GenerationOptions& options, bool speculate) {
  Generator g(e.pipeline(), e.tokenizer(), e.n_ctx());
  if (speculate) g.set_drafter(e.drafter(), e.options().speculative);
  Outcome r;
  GenerationResult res = g.generate(prompt, options, [&](const std::string& t) {
    r.text += t;
    return true;
  });
  r.tokens = res.tokens;
  r.drafted = res.drafted;
  r.accepted = res.accepted;
  return r;
}

GenerationOptions greedy(int n) {
  GenerationOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0.0f;
  o.ignore_eos = true;
  return o;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time, there was a little girl named Lily. Lily loved to play outside. One day, Lily",
    "The little dog ran to the park. The little dog",
    "Tom and Sue went to the beach. They saw a big red boat and",
};

TEST(NgramDrafter, GuessesWhatFollowedTheLatestEarlierOccurrence) {
  std::vector<TokenId> out;
  // ... 7 8 9 | 1 2 3 4 | ... 1 2 3 -> 4 and on; the latest occurrence wins.
  NgramDrafter::lookup(std::vector<TokenId>{1, 2, 3, 5, 6, 9, 1, 2, 3, 4, 7, 1, 2, 3}, 3, 4, 2, out);
  EXPECT_EQ(out, (std::vector<TokenId>{4, 7, 1}));
  // The guess stops at the end of what is known.
  NgramDrafter::lookup(std::vector<TokenId>{5, 6, 7, 5, 6}, 8, 4, 2, out);
  EXPECT_EQ(out, (std::vector<TokenId>{7, 5, 6}));
  // Nothing as long as n_min matches: no guess.
  NgramDrafter::lookup(std::vector<TokenId>{1, 2, 3, 4, 3}, 8, 4, 2, out);
  EXPECT_TRUE(out.empty());
  NgramDrafter::lookup(std::vector<TokenId>{1, 2, 1, 2}, 0, 4, 2, out);
  EXPECT_TRUE(out.empty());
  NgramDrafter::lookup(std::vector<TokenId>{}, 4, 4, 2, out);
  EXPECT_TRUE(out.empty());
}

// Greedy: the same tokens with and without guesses, n-gram or a draft model
// (the model itself drafting: every row of a long guess is checked and most
// are right; SmolLM2's Q4_1 drafting for its F32 copy: a real pair).
TEST(Speculative, GreedyTokensAreThoseOfPlainDecoding) {
  std::vector<std::pair<std::string, std::string>> pairs = {{stories(), stories()}};
  const std::string smol_q = models_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  const std::string smol_f = models_dir() + "/SmolLM2-135M-Instruct.F32.gguf";
  SHOAL_NEED_FILE(smol_q);
  SHOAL_NEED_FILE(smol_f);
  pairs.emplace_back(smol_f, smol_q);
  for (const auto& [target, draft] : pairs) {
    SCOPED_TRACE(target);
    const bool small = target == stories();
    auto plain = load_engine(target, 1, 64, 1, 256);
    for (SpecType type : {SpecType::Ngram, SpecType::Draft}) {
      SCOPED_TRACE(spec_type_name(type));
      auto spec = spec_engine(target, type, type == SpecType::Draft ? draft : "");
      int drafted = 0, accepted = 0;
      for (const auto& text : kPrompts) {
        const auto prompt = plain->tokenizer().encode(text, true, false);
        const Outcome want = generate(*plain, prompt, greedy(small ? 60 : 24), false);
        const Outcome got = generate(*spec, prompt, greedy(small ? 60 : 24), true);
        EXPECT_EQ(got.tokens, want.tokens) << text;
        EXPECT_EQ(got.text, want.text);
        drafted += got.drafted;
        accepted += got.accepted;
      }
      // The test means something only if guesses were checked, right and wrong.
      EXPECT_GT(accepted, 0);
      if (type == SpecType::Ngram) EXPECT_LT(accepted, drafted);
    }
  }
}

// Every architecture Shoal runs: the random-weight models, each drafting
// for itself and by n-gram. A model whose state cannot be cut back is
// refused by name.
TEST(Speculative, EveryArchitectureKeepsItsTokens) {
  for (const auto& path : random_model_paths()) {
    SCOPED_TRACE(path);
    auto plain = load_engine(path, 1, 64, 1, 256);
    const auto prompt = plain->tokenizer().encode("Once upon a time, a cat and a dog", true, false);
    const Outcome want = generate(*plain, prompt, greedy(40), false);
    // A hybrid model guesses (its stages take a wrong guess back within the
    // step), but as a draft model its state would have to go back over many
    // steps: refused by name.
    const bool recurrent = plain->config().has_recurrent_layers();
    if (recurrent) {
      try {
        spec_engine(path, SpecType::Draft, path);
        ADD_FAILURE() << "a recurrent draft model was taken";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cannot be cut back"), std::string::npos) << e.what();
      }
    }
    // And a file with its own multi-token-prediction block drafts with it.
    for (SpecType type : {SpecType::Ngram, SpecType::Draft, SpecType::Mtp}) {
      if (recurrent && type == SpecType::Draft) continue;
      if (type == SpecType::Mtp && plain->config().n_nextn == 0) continue;
      auto spec = spec_engine(path, type, type == SpecType::Draft ? path : "");
      const Outcome got = generate(*spec, prompt, greedy(40), true);
      EXPECT_EQ(got.tokens, want.tokens) << spec_type_name(type);
      if (type != SpecType::Ngram) EXPECT_GT(got.drafted, 0) << spec_type_name(type);
      if (type == SpecType::Draft) EXPECT_GT(got.accepted, 0);
    }
  }
}

// A hybrid model's next turn: the slot's record ends where the last right
// guess did, its stages maybe past it (the last step's wrong guesses); a
// prompt that extends the record reuses it, the stages taking that step
// back, and the tokens are a fresh run's.
TEST(Speculative, AHybridModelsNextTurnReusesTheSlotPastItsWrongGuesses) {
  for (const char* name : {"random-qwen35", "random-qwen3next"}) {
    SCOPED_TRACE(name);
    const std::string path = random_model_path(name), draft = random_model_path("random-qwen3");
    SHOAL_NEED_FILE(path);
    SHOAL_NEED_FILE(draft);
    auto spec = spec_engine(path, SpecType::Draft, draft);
    auto prompt = spec->tokenizer().encode("Once upon a time, a cat and a dog", true, false);
    int rewound = 0;
    for (int turn = 0; turn < 4; ++turn) {
      Generator g(spec->pipeline(), spec->tokenizer(), spec->n_ctx());
      g.set_drafter(spec->drafter(), spec->options().speculative);
      const GenerationResult got = g.generate(prompt, greedy(12), [](const std::string&) { return true; });
      auto plain = load_engine(path, 1, 64, 1, 256);
      EXPECT_EQ(got.tokens, generate(*plain, prompt, greedy(12), false).tokens) << "turn " << turn;
      // All that was fed: the last turn's prompt and its tokens but the last (sampled, never fed).
      if (turn > 0) EXPECT_EQ(got.n_reused, static_cast<int>(prompt.size()) - 3) << "turn " << turn;
      rewound += got.drafted > got.accepted;
      prompt.insert(prompt.end(), got.tokens.begin(), got.tokens.end());
      prompt.push_back(static_cast<TokenId>(30 + turn));  // the user's turn
      prompt.push_back(static_cast<TokenId>(40 + turn));
    }
    EXPECT_GT(rewound, 0) << "no turn ended past a wrong guess";
  }
}

// Seeded sampling: a verification row is sampled with the same sampler
// state as plain decoding, so the stream is the same token for token.
TEST(Speculative, SeededSamplingGivesThePlainStream) {
  auto plain = load_engine(stories(), 1, 64, 1, 256);
  for (SpecType type : {SpecType::Ngram, SpecType::Draft}) {
    auto spec = spec_engine(stories(), type, type == SpecType::Draft ? stories() : "");
    int accepted = 0;
    for (uint64_t seed : {1u, 2u, 3u, 42u}) {
      GenerationOptions o;
      o.max_tokens = 60;
      o.sampling.temperature = 0.7f;
      o.sampling.repeat_penalty = 1.1f;
      o.sampling.seed = seed;
      const auto prompt = plain->tokenizer().encode(kPrompts[0], true, false);
      const Outcome want = generate(*plain, prompt, o, false);
      const Outcome got = generate(*spec, prompt, o, true);
      EXPECT_EQ(got.tokens, want.tokens) << "seed " << seed;
      accepted += got.accepted;
    }
    EXPECT_GT(accepted, 0) << spec_type_name(type);
  }
}

// Sampling from the whole distribution at `temperature` (no cuts).
GenerationOptions pure_sampling(int max_tokens, float temperature, uint64_t seed) {
  GenerationOptions o;
  o.max_tokens = max_tokens;
  o.ignore_eos = true;
  o.sampling.temperature = temperature;
  o.sampling.top_k = 0;
  o.sampling.top_p = 1.0f;
  o.sampling.min_p = 0.0f;
  o.sampling.seed = seed;
  return o;
}

// Upper 0.1 % point of chi-square with df degrees of freedom (Wilson-Hilferty).
double chi_square_critical(int df) {
  const double z = 3.090232, k = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - k + z * std::sqrt(k), 3.0);
}

// Pearson's statistic of observed counts against probabilities, bins with
// fewer than five expected pooled into one.
void expect_distribution(const std::map<TokenId, int>& seen, const std::vector<double>& p, int n) {
  double stat = 0, rest_expected = 0, rest_seen = n;
  int bins = 0;
  for (size_t id = 0; id < p.size(); ++id) {
    const double expected = p[id] * n;
    if (expected < 5) {
      rest_expected += expected;
      continue;
    }
    const auto it = seen.find(static_cast<TokenId>(id));
    const double got = it == seen.end() ? 0 : it->second;
    rest_seen -= got;
    stat += (got - expected) * (got - expected) / expected;
    ++bins;
  }
  if (rest_expected > 0) {
    stat += (rest_seen - rest_expected) * (rest_seen - rest_expected) / rest_expected;
    ++bins;
  }
  ASSERT_GE(bins, 3) << "too few bins for the test to mean anything";
  std::printf("chi-square %.1f over %d bins (0.1%% point %.1f), %d samples\n", stat, bins,
              chi_square_critical(bins - 1), n);
  EXPECT_LT(stat, chi_square_critical(bins - 1)) << bins << " bins, " << n << " samples";
}

// The target's distribution at `temperature` after `tokens` (a plain forward).
std::vector<double> target_probabilities(Engine& e, const std::vector<TokenId>& tokens, double temperature) {
  e.pipeline().truncate_sequence(0, 0);
  const std::vector<float> logits = all_logits(e, tokens, 64);
  const int n_vocab = e.config().n_vocab;
  const float* last = logits.data() + logits.size() - n_vocab;
  const float top = *std::max_element(last, last + n_vocab);
  std::vector<double> p(static_cast<size_t>(n_vocab));
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += p[i] = std::exp(static_cast<double>(last[i] - top) / temperature);
  for (double& x : p) x /= sum;
  e.pipeline().truncate_sequence(0, 0);
  return p;
}

// Many seeds at temperature 2 (a broad distribution) with the model drafting
// for itself: the second token always comes from a verification step's first
// row; given the first, it must follow the target's distribution
// (stories260K: 512 tokens).
TEST(Speculative, SampledTokensFollowTheTargetDistribution) {
  auto spec = spec_engine(stories(), SpecType::Draft, stories(), 1, 4);
  auto plain = load_engine(stories(), 1, 64, 1, 256);
  const auto prompt = plain->tokenizer().encode("Once upon a time, there was a", true, false);
  constexpr int kSamples = 3000;
  constexpr float kTemperature = 2.0f;
  std::map<TokenId, int> first;
  std::vector<std::vector<TokenId>> streams;
  int drafted = 0;
  for (int seed = 0; seed < kSamples; ++seed) {
    // The last token is never guessed: the second is.
    const GenerationOptions o = pure_sampling(3, kTemperature, static_cast<uint64_t>(seed) + 1);
    const Outcome r = generate(*spec, prompt, o, true);
    ASSERT_EQ(r.tokens.size(), 3u);
    streams.push_back(r.tokens);
    ++first[r.tokens[0]];
    drafted += r.drafted;
  }
  EXPECT_GE(drafted, kSamples);  // every second token came from a verification row
  const TokenId t1 =
      std::max_element(first.begin(), first.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  std::map<TokenId, int> second;
  for (const auto& s : streams)
    if (s[0] == t1) ++second[s[1]];
  std::vector<TokenId> ctx = prompt;
  ctx.push_back(t1);
  expect_distribution(second, target_probabilities(*plain, ctx, kTemperature), first[t1]);
}

// Each row of one verification: the first always sampled, the next only
// after a right guess. Over many seeds each row's tokens follow the
// target's distribution there (the rows are the model's real logits after
// the prompt and the greedy guess).
TEST(Speculative, EveryVerificationRowSamplesTheTarget) {
  auto e = load_engine(stories(), 1, 64, 1, 256);
  const auto prompt = e->tokenizer().encode("Once upon a time, there was a little", true, false);
  const int n_vocab = e->config().n_vocab;
  constexpr float kTemperature = 1.5f;
  // The greedy guess of two tokens, and the logits after the prompt and after each guessed token.
  std::vector<TokenId> fed = prompt, guess;
  for (int k = 0; k < 2; ++k) {
    e->pipeline().truncate_sequence(0, 0);
    const std::vector<float> l = all_logits(*e, fed, 64);
    const float* last = l.data() + l.size() - n_vocab;
    guess.push_back(static_cast<TokenId>(std::max_element(last, last + n_vocab) - last));
    fed.push_back(guess.back());
  }
  e->pipeline().truncate_sequence(0, 0);
  const std::vector<float> all = all_logits(*e, fed, 64);
  const std::vector<float> rows(all.end() - 3 * n_vocab, all.end());
  std::vector<std::map<TokenId, int>> seen(3);
  std::vector<int> reached(3, 0);
  constexpr int kSamples = 20000;
  for (int seed = 0; seed < kSamples; ++seed) {
    const GenerationOptions o = pure_sampling(8, kTemperature, static_cast<uint64_t>(seed) + 1);
    SequenceDecoder d(e->tokenizer(), n_vocab, e->n_ctx(), o, prompt);
    d.verify(rows.data(), guess);
    const auto out = d.generated();
    ASSERT_EQ(static_cast<int>(out.size()), d.accepted() + 1);
    for (size_t i = 0; i < out.size(); ++i) {
      ++reached[i];
      ++seen[i][out[i]];
    }
  }
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    std::vector<TokenId> ctx = prompt;
    ctx.insert(ctx.end(), guess.begin(), guess.begin() + r);
    ASSERT_GT(reached[r], 500);
    expect_distribution(seen[r], target_probabilities(*e, ctx, kTemperature), reached[r]);
  }
}

// The Scheduler: eight requests on four slots, each drafting, give the
// tokens of plain decoding alone; the stats count what was guessed; a
// request may turn speculation off. The MTP draft too, on the hybrid files
// that carry its block (each slot's block cache beside the model's).
TEST(Speculative, SchedulerSlotsKeepTheirTokens) {
  struct Case {
    std::string path;
    SpecType type;
  };
  std::vector<Case> cases = {{stories(), SpecType::Ngram}, {stories(), SpecType::Draft}};
  for (const char* name : {"random-qwen35", "random-qwen35moe"})
    if (file_exists(random_model_path(name)) || std::getenv("SHOAL_REQUIRE_MODELS"))
      cases.push_back({random_model_path(name), SpecType::Mtp});
  for (const auto& [path, type] : cases) {
    SCOPED_TRACE(path);
    SCOPED_TRACE(spec_type_name(type));
    auto plain = load_engine(path, 1, 64, 1, 256);
    auto spec = spec_engine(path, type, type == SpecType::Draft ? path : "", 4);
    std::vector<std::vector<TokenId>> want;
    std::vector<GenerationOptions> options;
    std::vector<std::vector<TokenId>> prompts;
    for (int i = 0; i < 8; ++i) {
      prompts.push_back(plain->tokenizer().encode(kPrompts[i % kPrompts.size()], true, false));
      GenerationOptions o = greedy(30 + 5 * i);
      if (i % 3 == 1) {
        o.sampling.temperature = 0.8f;
        o.sampling.seed = 77 + i;
      }
      if (i == 5) o.draft_max = 0;  // this one plainly
      options.push_back(o);
      want.push_back(generate(*plain, prompts.back(), o, false).tokens);
    }
    std::mutex m;
    std::condition_variable cv;
    std::map<int, std::vector<TokenId>> got;
    {
      Scheduler scheduler(*spec);
      for (int i = 0; i < 8; ++i) {
        Request r;
        r.prompt = prompts[i];
        r.options = options[i];
        r.on_done = [&, i](const RequestResult& res) {
          std::lock_guard lock(m);
          got[i] = res.tokens;
          cv.notify_all();
        };
        scheduler.submit(std::move(r));
      }
      std::unique_lock lock(m);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return got.size() == 8; }));
      const SchedulerStats stats = scheduler.stats();
      // Random weights' MTP block guesses, but seldom right.
      if (type == SpecType::Mtp) EXPECT_GT(stats.drafted, 0u);
      else EXPECT_GT(stats.accepted, 0u);
      EXPECT_LE(stats.accepted, stats.drafted);
    }
    for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
  }
}

// The draft window doubles while guesses are right, up to --draft-max's
// limit (not past what an int holds: a long quote is many right guesses),
// and falls to one more than was right.
TEST(Speculative, TheDraftWindowGrowsWhileRightAndShrinksWhenWrong) {
  auto e = load_engine(stories(), 1, 64, 1, 256);
  const int n_vocab = e->config().n_vocab;
  GenerationOptions o = greedy(-1);
  SpeculativeOptions spec;
  spec.draft_max = 64;
  const std::vector<TokenId> prompt = {1, 2, 3};
  SequenceDecoder d(e->tokenizer(), n_vocab, 1 << 20, o, prompt);
  std::vector<TokenId> out;
  // Rows whose argmax is token 7: a guess of 7s is right throughout.
  std::vector<float> rows(static_cast<size_t>(65) * n_vocab, 0.0f);
  for (int r = 0; r < 65; ++r) rows[static_cast<size_t>(r) * n_vocab + 7] = 10.0f;
  std::vector<int> windows;
  for (int step = 0; step < 40; ++step) {
    const DraftJob job = d.draft_job(0, spec, INT_MAX, out);
    windows.push_back(job.max);
    ASSERT_TRUE(d.verify(rows.data(), std::vector<TokenId>(static_cast<size_t>(job.max), 7)));
    EXPECT_EQ(d.accepted(), job.max);
  }
  EXPECT_EQ(windows.front(), 4);
  EXPECT_EQ(windows[1], 8);
  EXPECT_EQ(windows.back(), 64);
  // Two right, then a wrong one (row 2 says 7, the guess 9): three next time.
  ASSERT_TRUE(d.verify(rows.data(), std::vector<TokenId>{7, 7, 9, 9}));
  EXPECT_EQ(d.accepted(), 2);
  EXPECT_EQ(d.draft_job(0, spec, INT_MAX, out).max, 3);
  EXPECT_EQ(d.draft_job(0, spec, 2, out).max, 2);  // the caller's cap
}

TEST(Speculative, RefusesADraftWithAnotherVocabulary) {
  const std::string other = test_data_dir() + "/models/llama-2-tiny-random.gguf";
  try {
    spec_engine(stories(), SpecType::Draft, other);
    FAIL() << "a draft with another vocabulary was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
  try {
    spec_engine(stories(), SpecType::Draft, "");
    FAIL() << "--spec-type draft without -md was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-md"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shoal::testing
