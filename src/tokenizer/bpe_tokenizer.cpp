#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace shoal {
namespace {

struct Symbol {
  int prev;
  int next;
  uint32_t offset;  // bytes into the word
  uint32_t length;  // 0 once merged into the symbol on its left
};

struct Bigram {
  int left;
  int right;
  int rank;
  uint32_t size;  // bytes of left + right when queued; a mismatch means stale
};

// Lowest rank first; on equal ranks the leftmost pair (llama.cpp's order).
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

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

  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t offset = 0; offset < word.size();) {
    const size_t length = std::min(utf8_sequence_length(static_cast<unsigned char>(word[offset])), word.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + length == word.size() ? -1 : index + 1, static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(length)});
    offset += length;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto text_of = [&](const Symbol& s) { return word.substr(s.offset, s.length); };
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const int rank = vocab_.merge_rank(text_of(symbols[left]), text_of(symbols[right]));
    if (rank < 0) return;
    queue.push({left, right, rank, symbols[left].length + symbols[right].length});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // A symbol only grows by absorbing its right neighbour, so equal sizes
    // mean the same text as when the pair was queued.
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.size) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (const Symbol& s : symbols) {
    if (s.length == 0) continue;
    const std::string_view piece = text_of(s);
    const TokenId id = vocab_.find_or_none(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    // As llama.cpp: single bytes of the encoded text that happen to be tokens;
    // the rest are dropped.
    for (const char c : piece) {
      const TokenId b = vocab_.find_or_none(std::string_view(&c, 1));
      if (b != kNoToken) out.push_back(b);
    }
  }
}

}  // namespace shoal
