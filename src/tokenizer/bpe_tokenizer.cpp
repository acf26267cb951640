#include "tokenizer/bpe_tokenizer.h"

#include <optional>

#include "tokenizer/byte_level.h"
#include "tokenizer/pair_merge.h"
#include "tokenizer/utf8.h"

namespace shoal {

BpeTokenizer::BpeTokenizer(const Vocab& vocab) : vocab_(vocab), pre_(pretokenizer_spec(vocab.pre()).patterns) {}

void BpeTokenizer::encode(std::string_view text, std::vector<TokenId>& out) const {
  std::string canonical, regex_safe;
  if (vocab_.escape_spaces()) {
    // Spaces as U+2581 before anything else (llama_escape_whitespace).
    std::string escaped;
    escaped.reserve(text.size());
    for (const char c : text) escaped += c == ' ' ? std::string_view("\xE2\x96\x81") : std::string_view(&c, 1);
    canonicalize_utf8(escaped, canonical, regex_safe);
  } else {
    canonicalize_utf8(text, canonical, regex_safe);
  }
  std::string encoded;
  for (const std::string_view word : pre_.split(regex_safe)) {
    // The two strings have the same layout, so offsets carry over.
    const size_t offset = static_cast<size_t>(word.data() - regex_safe.data());
    encoded.clear();
    if (vocab_.escape_spaces()) {
      encoded.assign(canonical, offset, word.size());  // merges run on the raw UTF-8
    } else {
      for (size_t i = offset; i < offset + word.size(); ++i)
        encoded += byte_level_char(static_cast<uint8_t>(canonical[i]));
    }
    encode_word(encoded, out);
  }
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  // A word that is already a token stays whole (llama3's ignore_merges; and
  // gemma4's runs of newlines, llama.cpp's fix for them).
  if (vocab_.ignore_merges() || (vocab_.escape_spaces() && word.find_first_not_of('\n') == std::string_view::npos)) {
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
    // As llama.cpp: single bytes of the encoded text that happen to be tokens
    // (raw UTF-8: their <0xXX> tokens); the rest are dropped.
    for (const char c : piece) {
      const TokenId b = vocab_.escape_spaces() ? vocab_.byte_to_token(static_cast<uint8_t>(c))
                                               : vocab_.find_or_none(std::string_view(&c, 1));
      if (b != kNoToken) out.push_back(b);
    }
  });
}

}  // namespace shoal
