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

  // Each operation below is bounded by construction: the stacks a character
  // leads to are found once each (a rule reached twice by different paths
  // is expanded once), and an operation that would do more than
  // kWorkPerToken steps of expansion throws shoal::Error naming the grammar
  // as too costly, so one request's grammar cannot hold a thread, or the
  // batch it shares, for long (docs/server-api.md, "Constrained output").
  static constexpr uint64_t kWorkPerToken = uint64_t{1} << 18;

  // Takes `bytes` if the grammar allows them (the state moves on) and
  // returns true; otherwise returns false and the state is unchanged.
  // Throws shoal::Error when the grammar is so ambiguous that the ways to
  // read the text pass a bound, or past the work bound.
  bool accept(std::string_view bytes);
  // The text so far is a whole match: generation may end here.
  bool accepting() const;
  // A whole match after which nothing may follow: generation must end.
  bool finished() const;
  // Sets allowed[id] = 1 for every token of the trie whose bytes may come
  // next (and leaves the rest as they are). Throws past the work bound.
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

  // Steps of expansion done in one operation, against kWorkPerToken.
  class Work {
   public:
    void charge(uint64_t steps);

   private:
    uint64_t done_ = 0;
  };
  class Expansion;

  // One byte of UTF-8: refused (not UTF-8, overlong, a surrogate, beyond
  // U+10FFFF), pending (more bytes to come), or complete (`cp` is set).
  static Utf8Step utf8_step(Utf8& u, uint8_t byte, uint32_t& cp);
  // Whether some stack may take a character that starts as `u` does.
  bool may_continue(const std::vector<Stack>& stacks, const Utf8& u) const;
  bool advance(State& state, uint8_t byte, Work& work) const;
  void advance_char(const std::vector<Stack>& from, uint32_t code_point, std::vector<Stack>& to, Work& work) const;
  class Walk;

  std::shared_ptr<const Grammar> grammar_;
  State state_;
};

}  // namespace shoal::grammar
