#pragma once
// A batch of tokens from one or more sequences, the unit every stage runs.
// Row t of the activations belongs to token t.
#include <cstdint>
#include <vector>

namespace shoal {

struct Batch {
  std::vector<int32_t> tokens;     // token ids (used by the embedding only)
  std::vector<int32_t> positions;  // position of each token in its sequence
  std::vector<int32_t> seq_ids;    // which sequence (KV slot) each token extends
  std::vector<uint8_t> logits;     // 1 where the head must produce logits
  // Every row is finished after the model's last layer and kept after the
  // output norm (Pipeline::normed_rows), not only the rows with logits: the
  // MTP draft reads the model's hidden state at every position.
  bool all_rows = false;

  int size() const { return static_cast<int>(tokens.size()); }
  void clear() { tokens.clear(); positions.clear(); seq_ids.clear(); logits.clear(); all_rows = false; }
  void add(int32_t token, int32_t position, int32_t seq, bool want_logits) {
    tokens.push_back(token);
    positions.push_back(position);
    seq_ids.push_back(seq);
    logits.push_back(want_logits ? 1 : 0);
  }
  // The rows that want logits, ascending, into `out` (reused); false, and
  // `out` untouched, when the batch has no logits flags.
  bool logit_rows(std::vector<int32_t>& out) const {
    if (logits.size() != tokens.size()) return false;
    out.clear();
    for (size_t t = 0; t < logits.size(); ++t)
      if (logits[t]) out.push_back(static_cast<int32_t>(t));
    return true;
  }
  // The rows the stage that ends the model must finish: those with logits
  // (into out, as logit_rows), or false for all of them.
  bool finished_rows(std::vector<int32_t>& out) const { return !all_rows && logit_rows(out); }
  int n_logits() const {
    int n = 0;
    for (uint8_t l : logits) n += l;
    return n;
  }
};

}  // namespace shoal
