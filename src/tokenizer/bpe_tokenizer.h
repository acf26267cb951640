#pragma once
// Byte-level BPE tokenizer (tokenizer.ggml.model "gpt2"): the pre-tokenizer
// cuts text into words, each word's bytes are mapped to GPT-2's byte-level
// alphabet, and the merges are applied to each word in rank order. Same
// algorithm and tie-breaks as llama.cpp's llm_tokenizer_bpe_session.
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace shoal {

class BpeTokenizer {
 public:
  // Compiles the pre-tokenizer of vocab.pre(); throws shoal::Error if unknown.
  explicit BpeTokenizer(const Vocab& vocab);

  // Appends the tokens of `text` (raw UTF-8; invalid bytes are read as U+FFFD
  // as llama.cpp does). Thread-safe.
  void encode(std::string_view text, std::vector<TokenId>& out) const;

 private:
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;

  const Vocab& vocab_;
  PreTokenizer pre_;
};

}  // namespace shoal
