#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace shoal {
namespace {

// Higher logit first; equal logits by lower id. A total order, so partial
// sorts give the same candidates on every platform.
constexpr auto kBefore = [](const auto& a, const auto& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
};

// Index of the largest of logit(0 .. size - 1), the lowest among equals. Four
// lanes instead of one running maximum: a single one is a chain of dependent
// instructions, four overlap (several times faster over 256k candidates).
template <typename Logit>
size_t argmax(size_t size, Logit logit) {
  float best[4] = {logit(0), logit(0), logit(0), logit(0)};
  size_t at[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= size; i += 4) {
    for (size_t j = 0; j < 4; ++j) {
      if (logit(i + j) > best[j]) {
        best[j] = logit(i + j);
        at[j] = i + j;
      }
    }
  }
  for (; i < size; ++i) {
    if (logit(i) > best[0]) {
      best[0] = logit(i);
      at[0] = i;
    }
  }
  size_t lane = 0;
  for (size_t j = 1; j < 4; ++j) {
    if (best[j] > best[lane] || (best[j] == best[lane] && at[j] < at[lane])) lane = j;
  }
  return at[lane];
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int n_vocab)
    : params_(params), n_vocab_(n_vocab) {
  if (n_vocab < 1) fail("sampler needs a vocabulary of at least one token, got {}", n_vocab);
  seed_ = params.seed == kRandomSeed ? std::random_device{}() : params.seed;
  // Seeds below 2^32 seed the generator as llama.cpp's std::mt19937(seed) does.
  rng_.seed(static_cast<uint32_t>(seed_ ^ (seed_ >> 32)));
  candidates_.resize(static_cast<size_t>(n_vocab));
  counts_.assign(static_cast<size_t>(n_vocab), 0);
  for (const auto& [id, bias] : params_.logit_bias)
    if (id < 0 || id >= n_vocab) fail("logit_bias names token {}, outside the vocabulary of {}", id, n_vocab);
}

int32_t Sampler::sample(const float* logits, std::span<const int32_t> history) {
  const size_t n = candidates_.size();
  const bool penalized = penalizes(history);
  const bool biased = !params_.logit_bias.empty();
  // Plain greedy reads the logits as they are (a serving step runs this
  // for every stream, while the other threads wait).
  if (params_.temperature <= 0.0f && !penalized && !biased)
    return static_cast<int32_t>(argmax(n, [&](size_t i) { return logits[i]; }));
  Candidate* c = candidates_.data();
  for (size_t i = 0; i < n; ++i) c[i] = {logits[i], static_cast<int32_t>(i)};
  for (const auto& [id, bias] : params_.logit_bias) c[id].logit += bias;
  if (penalized) apply_penalties(history);
  const auto logit_of = [&](size_t i) { return c[i].logit; };
  if (biased && !(c[argmax(n, logit_of)].logit > -std::numeric_limits<float>::infinity()))
    fail("logit_bias bans every token that could come next");

  if (params_.temperature <= 0.0f) {
    return c[argmax(n, logit_of)].id;
  }

  // Live candidates are [0, size); `sorted`: in kBefore order.
  size_t size = n;
  bool sorted = false;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    size = static_cast<size_t>(params_.top_k);
    std::partial_sort(c, c + size, c + n, kBefore);
    sorted = true;
  }
  const float top = c[sorted ? 0 : argmax(size, logit_of)].logit;
  // Min-p keeps logit >= top + log(min_p). Its set and top-p's are both runs
  // from the top, so applying it during top-p gives llama.cpp's result (as
  // long as top-p measures mass over everything) and keeps the sort small.
  const float cutoff = params_.min_p > 0.0f
                          ? top + std::log(std::min(params_.min_p, 1.0f))
                          : -std::numeric_limits<float>::infinity();
  if (params_.top_p < 1.0f) {
    size = cut_top_p(size, sorted, top, cutoff);
  } else if (params_.min_p > 0.0f) {
    size = cut_below(size, cutoff);
  }

  // Temperature reshapes what is left (the maximum always is); the weights
  // overwrite the logits.
  const float inv_temp = 1.0f / params_.temperature;
  double sum = 0.0;
  for (size_t i = 0; i < size; ++i) {
    c[i].logit = std::exp((c[i].logit - top) * inv_temp);
    sum += c[i].logit;
  }
  const double target = uniform() * sum;
  double cumulative = 0.0;
  for (size_t i = 0; i < size; ++i) {
    cumulative += c[i].logit;
    if (target < cumulative) return c[i].id;
  }
  return c[size - 1].id;  // rounding left target at the very top
}

// llama.cpp's repetition penalty and OpenAI's presence/frequency penalties,
// over the last repeat_last_n tokens. counts_ is back to zero on return.
bool Sampler::penalizes(std::span<const int32_t> history) const {
  const SamplingParams& p = params_;
  const bool any = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f ||
                   p.frequency_penalty != 0.0f;
  return any && p.repeat_last_n != 0 && !history.empty();
}

void Sampler::apply_penalties(std::span<const int32_t> history) {
  const SamplingParams& p = params_;
  const size_t window = p.repeat_last_n < 0
                            ? history.size()
                            : std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
  const std::span<const int32_t> tail = history.last(window);
  for (int32_t token : tail) {
    if (token < 0 || token >= n_vocab_) {
      fail("token id {} in the history is outside the vocabulary (size {})", token, n_vocab_);
    }
  }
  for (int32_t token : tail) ++counts_[static_cast<size_t>(token)];
  for (int32_t token : tail) {
    int32_t& count = counts_[static_cast<size_t>(token)];
    if (count == 0) continue;  // this token was already penalised
    float& logit = candidates_[static_cast<size_t>(token)].logit;  // still indexed by id
    if (p.repeat_penalty != 1.0f) {
      logit = logit <= 0.0f ? logit * p.repeat_penalty : logit / p.repeat_penalty;
    }
    logit -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
    count = 0;
  }
}

// Keeps the smallest run from the top whose probability reaches top_p, cut
// at `cutoff` as well. Unsorted (no top-k), the candidates are first binned by
// logit: only the bands that make up the nucleus are sorted.
size_t Sampler::cut_top_p(size_t size, bool sorted, float top, float cutoff) {
  // Band of a logit `distance` below the top: 1/8 logit wide; the last band
  // takes everything further down (and -inf, NaN).
  constexpr float kBandsPerLogit = 8.0f;
  auto band_of = [](float distance) {
    return distance < kBands / kBandsPerLogit ? static_cast<int>(distance * kBandsPerLogit)
                                              : kBands - 1;
  };
  Candidate* c = candidates_.data();
  double sum = 0.0;
  if (sorted) {
    for (size_t i = 0; i < size; ++i) sum += std::exp(c[i].logit - top);
  } else {
    band_mass_.fill(0.0);
    for (size_t i = 0; i < size; ++i) {
      const float weight = std::exp(c[i].logit - top);
      sum += weight;
      band_mass_[static_cast<size_t>(band_of(top - c[i].logit))] += weight;
    }
  }
  const double target = static_cast<double>(params_.top_p) * sum;
  if (!sorted) {
    int last = 0;
    for (double mass = 0.0; last < kBands - 1; ++last) {
      mass += band_mass_[static_cast<size_t>(last)];
      if (mass >= target) break;
    }
    Candidate* end = std::partition(c, c + size, [&](const Candidate& x) {
      return x.logit >= cutoff && band_of(top - x.logit) <= last;
    });
    size = static_cast<size_t>(end - c);
    std::sort(c, end, kBefore);
  }
  double cumulative = 0.0;
  for (size_t i = 0; i < size; ++i) {
    if (c[i].logit < cutoff) return i;  // never at i = 0: cutoff <= top
    cumulative += std::exp(c[i].logit - top);
    if (cumulative >= target) return i + 1;
  }
  return size;
}

// Keeps the candidates with logit >= cutoff, in their order.
size_t Sampler::cut_below(size_t size, float cutoff) {
  size_t kept = 0;
  for (size_t i = 0; i < size; ++i) {
    if (candidates_[i].logit >= cutoff) candidates_[kept++] = candidates_[i];
  }
  return kept;  // >= 1: the maximum passes
}

double Sampler::uniform() {
  // Built by hand: std::uniform_real_distribution's output differs between
  // standard libraries, and the same seed must give the same tokens anywhere.
  const uint64_t high = rng_();
  const uint64_t low = rng_();
  return static_cast<double>(((high << 32) | low) >> 11) * 0x1.0p-53;
}

}  // namespace shoal
