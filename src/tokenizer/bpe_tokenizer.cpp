#include "tokenizer/bpe_tokenizer.h"

#include <optional>

#include "tokenizer/byte_level.h"
#include "tokenizer/pair_merge.h"
#include "tokenizer/utf8.h"

namespace shoal {

BpeTokenizer::BpeTokenizer(const Vocab& vocab) : vocab_(vocab), pre_(pretokenizer_spec(vocab.pre()).patterns) {}

void BpeTokenizer::encode(std::string_view text, std::vector<TokenId>& out) const {
  std::string canonical, regex_safe;
  canonicalize_utf8(text, canonical, regex_safe);
  std::string encoded;
  for (const std::string_view word : pre_.split(regex_safe)) {
    // The two strings have the same layout, so offsets carry over.
    const size_t offset = static_cast<size_t>(word.data() - regex_safe.data());
    encoded.clear();
    for (size_t i = offset; i < offset + word.size(); ++i) encoded += byte_level_char(static_cast<uint8_t>(canonical[i]));
    encode_word(encoded, out);
  }
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (vocab_.ignore_merges()) {
    const TokenId whole = vocab_.find_or_none(word);
    if (whole != kNoToken) {
      out.push_back(whole);
      return;
    }
  }

  // Lower ranks merge first: the priority is the rank's negative (exact
  // in a double for any rank a vocabulary has).
  const auto rank = [&](std::string_view left, std::string_view right, std::string_view) -> std::optional<double> {
    const int r = vocab_.merge_rank(left, right);
    if (r < 0) return std::nullopt;
    return -static_cast<double>(r);
  };
  merge_pairs(word, rank, [&](std::string_view piece) {
    const TokenId id = vocab_.find_or_none(piece);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
    // As llama.cpp: single bytes of the encoded text that happen to be tokens;
    // the rest are dropped.
    for (const char c : piece) {
      const TokenId b = vocab_.find_or_none(std::string_view(&c, 1));
      if (b != kNoToken) out.push_back(b);
    }
  });
}

}  // namespace shoal
