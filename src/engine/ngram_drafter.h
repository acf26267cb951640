#pragma once
// Prompt lookup (--spec-type ngram): the guess is what followed the latest
// earlier occurrence of the sequence's last few tokens, in its prompt or in
// what it generated. Free to make, and right for long stretches wherever a
// reply quotes: code edits, summaries, reformatted JSON.
#include "engine/drafter.h"

namespace shoal {

class NgramDrafter : public Drafter {
 public:
  // The longest n-gram is tried first; none shorter than n_min counts.
  explicit NgramDrafter(int n_max = 4, int n_min = 2);
  std::string describe() const override;
  // One sequence's guess (what propose does per job).
  static void lookup(std::span<const TokenId> history, int max, int n_max, int n_min, std::vector<TokenId>& out);

 protected:
  void guess(std::span<DraftJob> jobs) override;

 private:
  int n_max_, n_min_;
};

}  // namespace shoal
