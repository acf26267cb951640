#include "tokenizer/spm_tokenizer.h"

#include <queue>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace shoal {
namespace {

struct Symbol {
  int prev;
  int next;
  uint32_t offset;  // bytes into the text
  uint32_t length;  // 0 once merged into the symbol on its left
};

struct Bigram {
  int left;
  int right;
  float score;
  uint32_t size;  // bytes of left + right when queued; a mismatch means stale
};

// Highest score first; on equal scores the leftmost pair (llama.cpp's order).
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void SpmTokenizer::encode(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t length = std::min(utf8_sequence_length(static_cast<unsigned char>(text[offset])), text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + length == text.size() ? -1 : index + 1, static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(length)});
    offset += length;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const uint32_t size = symbols[left].length + symbols[right].length;
    const TokenId id = vocab_.find_or_none(text.substr(symbols[left].offset, size));
    if (id == kNoToken) return;
    queue.push({left, right, vocab_.token(id).score, size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != bigram.size) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  // Every surviving symbol is a single character or a merge that was a token,
  // so it is a token or falls back to one token per byte.
  for (int i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = text.substr(s.offset, s.length);
    const TokenId id = vocab_.find_or_none(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (const char c : piece) {
      TokenId byte = vocab_.byte_to_token(static_cast<uint8_t>(c));
      // llama.cpp throws here; a vocabulary without byte tokens gets <unk>.
      if (byte == kNoToken) byte = vocab_.unk();
      if (byte == kNoToken) fail("SPM vocabulary has neither a token for byte 0x{:02X} nor an unknown token",
                                 static_cast<unsigned char>(c));
      out.push_back(byte);
    }
  }
}

}  // namespace shoal
