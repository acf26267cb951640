#pragma once
// The vocabulary as a trie of its tokens' bytes: tokens that share a prefix
// share the path, so a grammar walks each prefix once when it works out
// which tokens may come next (GrammarMatcher::allowed_tokens) instead of
// trying all of a 150k vocabulary one by one.
#include <cstdint>
#include <string>
#include <vector>

namespace shoal::grammar {

class ByteTrie {
 public:
  // pieces[id]: token id's bytes; an empty piece (a control token) is left out.
  explicit ByteTrie(const std::vector<std::string>& pieces);

  struct Node {
    uint32_t first_child = 0;  // children are nodes[first_child, first_child + n_children)
    uint32_t n_children = 0;
    uint32_t first_token = 0;  // the tokens whose bytes end here: tokens_[first_token, + n_tokens)
    uint32_t n_tokens = 0;
    uint8_t byte = 0;          // the byte on the edge into this node
  };

  static constexpr uint32_t kRoot = 0;
  const Node& node(uint32_t i) const { return nodes_[i]; }
  int32_t token(uint32_t i) const { return tokens_[i]; }
  size_t size() const { return nodes_.size(); }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
};

}  // namespace shoal::grammar
