#include "engine/ngram_drafter.h"

#include <algorithm>

#include <fmt/format.h>

namespace shoal {

NgramDrafter::NgramDrafter(int n_max, int n_min) : n_max_(n_max), n_min_(n_min) {}

std::string NgramDrafter::describe() const { return fmt::format("n-gram lookup ({}..{} tokens)", n_min_, n_max_); }

void NgramDrafter::guess(std::span<DraftJob> jobs) {
  for (DraftJob& job : jobs) lookup(job.history, job.max, n_max_, n_min_, *job.out);
}

void NgramDrafter::lookup(std::span<const TokenId> history, int max, int n_max, int n_min, std::vector<TokenId>& out) {
  out.clear();
  const auto size = static_cast<ptrdiff_t>(history.size());
  if (max <= 0) return;
  for (int n = std::min<ptrdiff_t>(n_max, size - 1); n >= n_min; --n) {
    const std::span<const TokenId> tail = history.subspan(static_cast<size_t>(size - n));
    // The latest start i < size - n whose n tokens equal the tail: what
    // followed them (from i + n, which is before the end) is the guess.
    for (ptrdiff_t i = size - n - 1; i >= 0; --i) {
      if (!std::equal(tail.begin(), tail.end(), history.begin() + i)) continue;
      const ptrdiff_t from = i + n;
      const ptrdiff_t take = std::min<ptrdiff_t>(max, size - from);
      out.assign(history.begin() + from, history.begin() + from + take);
      return;
    }
  }
}

}  // namespace shoal
