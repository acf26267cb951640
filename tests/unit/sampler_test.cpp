#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>

#include "util/error.h"

namespace shoal {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> logits(n);
  for (float& l : logits) l = dist(rng);
  return logits;
}

// Logits whose softmax is `probs` (up to the constant that softmax ignores).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Temperature `temp`, every filter off, a fixed seed.
SamplingParams plain(float temp, uint64_t seed = 42) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

// The ids drawn over `draws` calls.
std::set<int32_t> support(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) seen.insert(sampler.sample(logits.data(), {}));
  return seen;
}

TEST(Sampler, GreedyPicksArgmax) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = random_logits(1000, seed, 2.0f);
    Sampler sampler(plain(0.0f), 1000);
    const auto argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(sampler.sample(logits.data(), {}), argmax);
  }
  const std::vector<float> tied = {1.0f, 5.0f, 5.0f, 2.0f};
  Sampler sampler(plain(0.0f), 4);
  EXPECT_EQ(sampler.sample(tied.data(), {}), 1);  // ties go to the lowest id
}

TEST(Sampler, TopKOneEqualsGreedyAtAnyTemperature) {
  for (float temp : {0.1f, 1.0f, 10.0f}) {
    for (uint32_t seed = 0; seed < 10; ++seed) {
      std::vector<float> logits = random_logits(500, seed, 1.0f);
      logits[100 + seed] = logits[300] = 9.0f;  // a tie at the top
      SamplingParams params = plain(temp, seed);
      params.top_k = 1;
      Sampler top1(params, 500);
      Sampler greedy(plain(0.0f), 500);
      EXPECT_EQ(top1.sample(logits.data(), {}), greedy.sample(logits.data(), {}));
      EXPECT_EQ(top1.sample(logits.data(), {}), static_cast<int32_t>(100 + seed));
    }
  }
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams params;  // the default chain
  params.temperature = 1.5f;
  params.seed = 1234;
  Sampler a(params, 2000), b(params, 2000);
  params.seed = 1235;
  Sampler c(params, 2000);
  EXPECT_EQ(a.seed(), 1234u);
  std::vector<int32_t> history;
  bool c_differs = false;
  for (uint32_t step = 0; step < 200; ++step) {
    const std::vector<float> logits = random_logits(2000, step, 1.0f);
    const int32_t token = a.sample(logits.data(), history);
    EXPECT_EQ(b.sample(logits.data(), history), token);
    c_differs |= c.sample(logits.data(), history) != token;
    history.push_back(token);
  }
  EXPECT_TRUE(c_differs);
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfTheBest) {
  // p_max = 0.30; min_p = 0.15 keeps p >= 0.045: the first five.
  const std::vector<double> probs = {0.30, 0.25, 0.20, 0.10, 0.05, 0.04, 0.03, 0.02, 0.01};
  SamplingParams params = plain(1.0f);
  params.min_p = 0.15f;
  Sampler sampler(params, static_cast<int>(probs.size()));
  EXPECT_EQ(support(sampler, logits_of(probs), 5000), (std::set<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Sorted: 0.35, 0.25, 0.15 reach 0.75 >= 0.7; they sit at ids 5, 2, 7.
  const std::vector<double> probs = {0.06, 0.10, 0.25, 0.03, 0.05, 0.35, 0.01, 0.15};
  SamplingParams params = plain(1.0f);
  params.top_p = 0.7f;
  Sampler sampler(params, static_cast<int>(probs.size()));
  EXPECT_EQ(support(sampler, logits_of(probs), 5000), (std::set<int32_t>{2, 5, 7}));
  // After top-k the nucleus is taken from the renormalised six: the same.
  params.top_k = 6;
  Sampler after_top_k(params, static_cast<int>(probs.size()));
  EXPECT_EQ(support(after_top_k, logits_of(probs), 5000), (std::set<int32_t>{2, 5, 7}));
}

TEST(Sampler, TopPThenMinPKeepsTheTighterCut) {
  // Most likely last: ids 8, 7, 6, … have p = 0.30, 0.25, 0.20, 0.10, 0.05, …
  const std::vector<double> probs = {0.01, 0.02, 0.03, 0.04, 0.05, 0.10, 0.20, 0.25, 0.30};
  for (int top_k : {0, 8}) {  // the binned path and the sorted one
    SamplingParams params = plain(1.0f);
    params.top_k = top_k;
    params.min_p = 0.15f;  // keeps p >= 0.045: five tokens
    params.top_p = 0.6f;   // 0.30 + 0.25 + 0.20 reach it: three
    Sampler tight_top_p(params, 9);
    EXPECT_EQ(support(tight_top_p, logits_of(probs), 5000), (std::set<int32_t>{6, 7, 8})) << top_k;
    params.top_p = 0.95f;  // seven of them; min-p's five are the cut
    Sampler tight_min_p(params, 9);
    EXPECT_EQ(support(tight_min_p, logits_of(probs), 5000), (std::set<int32_t>{4, 5, 6, 7, 8}))
        << top_k;
  }
}

TEST(Sampler, TopPWithoutTopKOnLargeVocabulary) {
  // A wide nucleus (about a thousand of 100k tokens) makes the sampler grow
  // its sorted prefix several times.
  const size_t n = 100000;
  const std::vector<float> logits = random_logits(n, 7, 2.0f);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - logits[order[0]]));
  std::set<int32_t> nucleus;
  double cumulative = 0.0;
  for (int32_t id : order) {
    nucleus.insert(id);
    cumulative += std::exp(static_cast<double>(logits[id] - logits[order[0]])) / sum;
    if (cumulative >= 0.5) break;
  }
  ASSERT_GT(nucleus.size(), 256u);

  SamplingParams params = plain(1.0f);
  params.top_p = 0.5f;
  Sampler sampler(params, static_cast<int>(n));
  const std::set<int32_t> seen = support(sampler, logits, 1000);
  for (int32_t id : seen) EXPECT_TRUE(nucleus.count(id)) << id;
  EXPECT_GT(seen.size(), nucleus.size() / 5);  // and it really samples inside
}

TEST(Sampler, RepeatPenaltyChangesTheArgmax) {
  std::vector<float> logits(10, 0.0f);
  logits[3] = 2.0f;
  logits[7] = 1.9f;
  const std::vector<int32_t> history = {3};
  SamplingParams params = plain(0.0f);
  EXPECT_EQ(Sampler(params, 10).sample(logits.data(), history), 3);
  params.repeat_penalty = 1.3f;  // 2.0 / 1.3 < 1.9
  EXPECT_EQ(Sampler(params, 10).sample(logits.data(), history), 7);

  // Negative logits are multiplied, so they too move down.
  std::vector<float> negative(10, -5.0f);
  negative[1] = -1.0f;
  negative[2] = -1.1f;
  EXPECT_EQ(Sampler(params, 10).sample(negative.data(), std::vector<int32_t>{1}), 2);
}

TEST(Sampler, RepeatPenaltyLooksOnlyAtTheWindow) {
  std::vector<float> logits(10, 0.0f);
  logits[3] = 2.0f;
  logits[7] = 1.9f;
  std::vector<int32_t> history = {3};
  history.insert(history.end(), 64, 0);  // token 3 is 65 tokens back
  SamplingParams params = plain(0.0f);
  params.repeat_penalty = 1.3f;
  params.repeat_last_n = 64;
  EXPECT_EQ(Sampler(params, 10).sample(logits.data(), history), 3);
  params.repeat_last_n = -1;  // the whole history
  EXPECT_EQ(Sampler(params, 10).sample(logits.data(), history), 7);
  params.repeat_last_n = 0;  // off
  EXPECT_EQ(Sampler(params, 10).sample(logits.data(), history), 3);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  const std::vector<float> logits = {1.0f, 0.5f};
  const std::vector<int32_t> history = {0, 0, 0};
  SamplingParams params = plain(0.0f);
  params.frequency_penalty = 0.1f;  // 1.0 - 3 * 0.1 = 0.7 > 0.5
  EXPECT_EQ(Sampler(params, 2).sample(logits.data(), history), 0);
  params.frequency_penalty = 0.2f;  // 1.0 - 0.6 = 0.4 < 0.5
  EXPECT_EQ(Sampler(params, 2).sample(logits.data(), history), 1);
  params.frequency_penalty = 0.0f;
  params.presence_penalty = 0.6f;  // once, whatever the count: 0.4 < 0.5
  EXPECT_EQ(Sampler(params, 2).sample(logits.data(), history), 1);
}

TEST(Sampler, RejectsHistoryOutsideTheVocabulary) {
  const std::vector<float> logits = {1.0f, 0.5f};
  SamplingParams params = plain(0.0f);
  params.repeat_penalty = 1.5f;
  Sampler sampler(params, 2);
  EXPECT_THROW(sampler.sample(logits.data(), std::vector<int32_t>{0, 2}), Error);
  EXPECT_THROW(sampler.sample(logits.data(), std::vector<int32_t>{-1}), Error);
  EXPECT_EQ(sampler.sample(logits.data(), std::vector<int32_t>{1}), 0);  // still sane
  EXPECT_THROW(Sampler(params, 0), Error);
}

// Pearson's chi-square of `draws` samples at temperature `temp` against
// softmax(logits / expected_temp).
double chi_square(const std::vector<float>& logits, float temp, float expected_temp, int draws) {
  Sampler sampler(plain(temp, 2024), static_cast<int>(logits.size()));
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(sampler.sample(logits.data(), {}))];
  double z = 0.0;
  for (float l : logits) z += std::exp(l / expected_temp);
  double chi2 = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double expected = draws * std::exp(logits[i] / expected_temp) / z;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

TEST(Sampler, SamplesInProportionToSoftmax) {
  const std::vector<float> logits = {0.0f, 0.5f, 1.0f, -1.0f, 2.0f, 0.2f, -0.5f, 1.5f};
  // 7 degrees of freedom: P(chi2 > 30) < 1e-4 for a correct sampler.
  EXPECT_LT(chi_square(logits, 1.0f, 1.0f, 20000), 30.0);
  EXPECT_LT(chi_square(logits, 2.0f, 2.0f, 20000), 30.0);
  // The bound has the power to tell a wrong temperature.
  EXPECT_GT(chi_square(logits, 1.0f, 2.0f, 20000), 300.0);
}

TEST(Sampler, LargeVocabularyDefaultChainStaysInTopK) {
  const size_t n = 256000;
  const std::vector<float> logits = random_logits(n, 99, 3.0f);
  std::vector<float> sorted(logits);
  std::nth_element(sorted.begin(), sorted.begin() + 39, sorted.end(), std::greater<float>());
  const float fortieth = sorted[39];
  SamplingParams params;  // top_k 40, top_p 0.95, min_p 0.05, temperature 0.8
  params.seed = 5;
  Sampler sampler(params, static_cast<int>(n));
  for (int i = 0; i < 50; ++i) {
    const int32_t token = sampler.sample(logits.data(), {});
    EXPECT_GE(logits[static_cast<size_t>(token)], fortieth);
  }
}

}  // namespace
}  // namespace shoal
