#pragma once
// Where generated text stands in a grammar, as llama.cpp's grammar sampler
// keeps it: a set of stacks of grammar positions, one per way the text so
// far can be read, each with a character set on top (or empty: the text is
// complete there). Bytes come in one at a time; a character split across
// tokens waits, half read, until its last byte.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/byte_trie.h"
#include "grammar/grammar.h"

namespace shoal::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Takes `bytes` if the grammar allows them (the state moves on) and
  // returns true; otherwise returns false and the state is unchanged.
  // Throws shoal::Error when the grammar is so ambiguous that the ways to
  // read the text pass a bound.
  bool accept(std::string_view bytes);
  // The text so far is a whole match: generation may end here.
  bool accepting() const;
  // A whole match after which nothing may follow: generation must end.
  bool finished() const;
  // Sets allowed[id] = 1 for every token of the trie whose bytes may come
  // next (and leaves the rest as they are).
  void allowed_tokens(const ByteTrie& trie, std::vector<uint8_t>& allowed) const;

 private:
  using Stack = std::vector<uint32_t>;  // positions in grammar symbols; the back is the next
  // A character being read, byte by byte.
  struct Utf8 {
    uint32_t partial = 0;  // its bits so far
    uint8_t need = 0;      // continuation bytes still to come
    uint8_t length = 0;    // its whole length in bytes
  };
  enum class Utf8Step { kRefused, kPending, kComplete };
  struct State {
    std::vector<Stack> stacks;
    Utf8 utf8;
  };

  // One byte of UTF-8: refused (not UTF-8, overlong, a surrogate, beyond
  // U+10FFFF), pending (more bytes to come), or complete (`cp` is set).
  static Utf8Step utf8_step(Utf8& u, uint8_t byte, uint32_t& cp);
  // Whether some stack may take a character that starts as `u` does.
  bool may_continue(const std::vector<Stack>& stacks, const Utf8& u) const;
  bool advance(State& state, uint8_t byte) const;
  void advance_char(const std::vector<Stack>& from, uint32_t code_point, std::vector<Stack>& to) const;
  void expand(Stack stack, std::vector<Stack>& out, int depth = 0) const;
  class Walk;

  std::shared_ptr<const Grammar> grammar_;
  State state_;
};

}  // namespace shoal::grammar
