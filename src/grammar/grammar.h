#pragma once
// A context-free grammar over Unicode code points, as GBNF (llama.cpp's
// grammar format) writes it: named rules, each a list of alternatives, each
// a sequence of character sets and references to rules. Repetitions and
// groups are already rewritten into rules of their own by the parser, so a
// matcher only ever sees sets and references.
#include <cstdint>
#include <string>
#include <vector>

namespace shoal::grammar {

struct CharRange {
  uint32_t lo = 0;  // inclusive
  uint32_t hi = 0;  // inclusive
};

struct Symbol {
  enum class Kind : uint8_t { End, Chars, Rule };
  Kind kind = Kind::End;
  bool negated = false;  // Chars: any code point outside the ranges
  uint32_t rule = 0;     // Rule: which
  uint32_t first = 0;    // Chars: ranges[first, first + count)
  uint32_t count = 0;
};

struct Grammar {
  // Every alternative's symbols, one after the other, each sequence closed by
  // an End symbol; a position in the grammar is an index here.
  std::vector<Symbol> symbols;
  std::vector<CharRange> ranges;
  // rules[r]: the index in `symbols` where each alternative of rule r starts.
  std::vector<std::vector<uint32_t>> rules;
  std::vector<std::string> names;  // rules[r]'s name (made-up ones for groups and repetitions)
  uint32_t root = 0;

  bool matches(const Symbol& chars, uint32_t code_point) const;
  // Whether some code point in [lo, hi] may match (a character still being read).
  bool may_match(const Symbol& chars, uint32_t lo, uint32_t hi) const;
};

}  // namespace shoal::grammar
