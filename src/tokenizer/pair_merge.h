#pragma once
// The merge loop BPE and SentencePiece share, as llama.cpp runs both: the
// text starts as one symbol per UTF-8 character; the adjacent pair with the
// best priority merges first (ties: the leftmost), and the pairs around the
// merged symbol are queued anew, until no queued pair may merge. Only how a
// pair is judged differs: a BPE merge rank (lower first), or the score of
// the SentencePiece token the pair spells (higher first).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "tokenizer/utf8.h"

namespace shoal {

// priority(left, right, both) → the pair's priority, higher first, or
// nullopt when it may not merge (`both` is left and right together).
// emit(piece) is called with each symbol left, in order.
template <typename Priority, typename Emit>
void merge_pairs(std::string_view text, Priority priority, Emit emit) {
  struct Symbol {
    int prev;
    int next;
    uint32_t offset;  // bytes into the text
    uint32_t length;  // 0 once merged into the symbol on its left
  };
  struct Pair {
    int left;
    int right;
    double priority;
    uint32_t size;  // bytes of left + right when queued; a mismatch means stale
  };
  // Best priority first; on equal ones the leftmost pair (llama.cpp's order).
  const auto later = [](const Pair& a, const Pair& b) {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  };

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const size_t length = std::min(utf8_sequence_length(static_cast<unsigned char>(text[offset])), text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + length == text.size() ? -1 : index + 1, static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(length)});
    offset += length;
  }

  std::priority_queue<Pair, std::vector<Pair>, decltype(later)> queue(later);
  auto text_of = [&](const Symbol& s) { return text.substr(s.offset, s.length); };
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const uint32_t size = symbols[left].length + symbols[right].length;
    const std::optional<double> p =
        priority(text_of(symbols[left]), text_of(symbols[right]), text.substr(symbols[left].offset, size));
    if (p) queue.push({left, right, *p, size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Pair pair = queue.top();
    queue.pop();
    Symbol& left = symbols[pair.left];
    Symbol& right = symbols[pair.right];
    // A symbol only grows by absorbing its right neighbour, so equal sizes
    // mean the same text as when the pair was queued.
    if (left.length == 0 || right.length == 0 || left.length + right.length != pair.size) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = pair.left;
    try_add(left.prev, pair.left);
    try_add(pair.left, left.next);
  }

  for (const Symbol& s : symbols)
    if (s.length != 0) emit(text_of(s));
}

}  // namespace shoal
