#pragma once
// Token sampling, in the order of llama.cpp's default chain:
//   logit bias → penalties → top-k → top-p → min-p → temperature → draw.
// The cuts are made on the untempered distribution; temperature only reshapes
// what is left. All buffers are sized at construction: sample() does not
// allocate. It is O(n_vocab) plus a sort of what survives: a partial sort of
// top-k, or without top-k the logit bands that hold the top-p nucleus —
// never a full sort of the vocabulary (unless top-p needs all of it).
#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace shoal {

struct SamplingParams {
  float temperature = 0.8f;     // <= 0: greedy (argmax, ties -> lowest id)
  int top_k = 40;               // <= 0 or >= n_vocab: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // llama.cpp: logit / p if > 0, logit * p if <= 0
  int repeat_last_n = 64;       // window for all penalties; 0: off, < 0: whole history
  float presence_penalty = 0.0f;   // OpenAI: logit -= presence if the token occurred
  float frequency_penalty = 0.0f;  // OpenAI: logit -= frequency * count
  uint64_t seed = 0xFFFFFFFF;   // default: a random seed each run (LLAMA_DEFAULT_SEED)
  // Added to a token's logit before anything else (OpenAI's and
  // llama-server's logit_bias); -inf bans the token.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

class Sampler {
 public:
  static constexpr uint64_t kRandomSeed = 0xFFFFFFFF;

  // Throws shoal::Error if n_vocab < 1 or a biased token is outside the
  // vocabulary.
  Sampler(const SamplingParams& params, int n_vocab);

  // logits: n_vocab values for the next position. history: every previous
  // token of the sequence, prompt included (the penalties look at its tail).
  // Throws shoal::Error for a token outside the vocabulary in the penalty
  // window (looked at only when a penalty is on).
  int32_t sample(const float* logits, std::span<const int32_t> history);

  uint64_t seed() const { return seed_; }  // the seed in effect

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };

  bool penalizes(std::span<const int32_t> history) const;  // a penalty is on and has tokens to look at
  void apply_penalties(std::span<const int32_t> history);
  size_t cut_top_p(size_t size, bool sorted, float top, float cutoff);
  size_t cut_below(size_t size, float cutoff);
  double uniform();  // [0, 1) from 53 bits of the generator

  SamplingParams params_;
  int n_vocab_;
  uint64_t seed_;
  std::mt19937 rng_;
  std::vector<Candidate> candidates_;  // n_vocab; the live ones at the front
  std::vector<int32_t> counts_;        // n_vocab; zero between calls
  // Top-p without top-k: probability mass per band of logits below the max.
  static constexpr int kBands = 256;
  std::array<double, kBands> band_mass_{};
};

}  // namespace shoal
