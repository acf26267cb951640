#pragma once
// SentencePiece-style tokenizer (tokenizer.ggml.model "llama"): start from
// single characters and keep merging the adjacent pair whose concatenation is
// the highest-scoring token; what never becomes a token falls back to byte
// tokens (<0x41>). Same algorithm and tie-breaks as llama.cpp's
// llm_tokenizer_spm.
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace shoal {

class SpmTokenizer {
 public:
  explicit SpmTokenizer(const Vocab& vocab) : vocab_(vocab) {}

  // `text` is already escaped (spaces as U+2581, prefix space added by the
  // caller). Appends to `out`. Thread-safe.
  void encode(std::string_view text, std::vector<TokenId>& out) const;

 private:
  const Vocab& vocab_;
};

}  // namespace shoal
