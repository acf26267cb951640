#include "engine/drafter.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"
#include "util/log.h"

namespace shoal {

void Drafter::propose(std::span<DraftJob> jobs) noexcept {
  for (DraftJob& job : jobs) job.out->clear();
  try {
    guess(jobs);
  } catch (const std::exception& e) {
    // A guess is only ever a speed-up: without one the step decodes as usual.
    spdlog::error("the draft failed: {}", e.what());
    for (DraftJob& job : jobs) job.out->clear();
  }
  for (DraftJob& job : jobs)
    if (static_cast<int>(job.out->size()) < job.min) job.out->clear();
}

void Drafter::see(const Batch& batch, const float* normed_rows) noexcept {
  try {
    observe(batch, normed_rows);
  } catch (const std::exception& e) {
    spdlog::error("the draft failed to follow the model: {}", e.what());
    forget_all();
  }
}

std::pair<int, bool> best_token(const float* logits, int n_vocab, float p_min) {
  const int best = static_cast<int>(std::max_element(logits, logits + n_vocab) - logits);
  if (p_min <= 0) return {best, true};
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - logits[best]));
  return {best, 1.0 / sum >= p_min};
}

SpecType parse_spec_type(const std::string& name) {
  if (name == "none") return SpecType::None;
  if (name == "ngram" || name == "ngram-simple") return SpecType::Ngram;
  if (name == "draft" || name == "draft-simple") return SpecType::Draft;
  if (name == "mtp" || name == "draft-mtp") return SpecType::Mtp;
  fail("--spec-type must be none, ngram, draft or mtp, not '{}'", name);
}

const char* spec_type_name(SpecType type) {
  switch (type) {
    case SpecType::Ngram: return "ngram";
    case SpecType::Draft: return "draft";
    case SpecType::Mtp: return "mtp";
    default: return "none";
  }
}

}  // namespace shoal
