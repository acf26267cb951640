#include "grammar/byte_trie.h"

#include <algorithm>

namespace shoal::grammar {

ByteTrie::ByteTrie(const std::vector<std::string>& pieces) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].empty()) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return pieces[static_cast<size_t>(a)] < pieces[static_cast<size_t>(b)] ||
           (pieces[static_cast<size_t>(a)] == pieces[static_cast<size_t>(b)] && a < b);
  });
  tokens_.reserve(ids.size());
  nodes_.emplace_back();
  // Depth first over (node, the sorted ids under it, depth): a node's
  // children are laid out together, in byte order, and each child's
  // subtree follows soon after, so a walk reads memory mostly forwards.
  struct Pending {
    uint32_t node;
    size_t begin, end;
    size_t depth;
  };
  const auto piece = [&](size_t i) -> const std::string& { return pieces[static_cast<size_t>(ids[i])]; };
  std::vector<Pending> todo{{kRoot, 0, ids.size(), 0}};
  while (!todo.empty()) {
    const Pending p = todo.back();
    todo.pop_back();
    size_t i = p.begin;
    nodes_[p.node].first_token = static_cast<uint32_t>(tokens_.size());
    for (; i < p.end && piece(i).size() == p.depth; ++i) tokens_.push_back(ids[i]);  // shorter sorts first
    nodes_[p.node].n_tokens = static_cast<uint32_t>(tokens_.size()) - nodes_[p.node].first_token;
    nodes_[p.node].first_child = static_cast<uint32_t>(nodes_.size());
    std::vector<Pending> children;
    while (i < p.end) {
      const char byte = piece(i)[p.depth];
      size_t j = i;
      while (j < p.end && piece(j)[p.depth] == byte) ++j;
      Node child;
      child.byte = static_cast<uint8_t>(byte);
      nodes_.push_back(child);
      children.push_back({static_cast<uint32_t>(nodes_.size() - 1), i, j, p.depth + 1});
      i = j;
    }
    nodes_[p.node].n_children = static_cast<uint32_t>(nodes_.size()) - nodes_[p.node].first_child;
    todo.insert(todo.end(), children.rbegin(), children.rend());  // the first child next
  }
}

}  // namespace shoal::grammar
