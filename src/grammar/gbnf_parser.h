#pragma once
// GBNF text → Grammar. The format is llama.cpp's (grammars/README.md there):
//   name ::= alternatives         (the grammar starts at `root`)
//   "literal"  [a-z0-9_]  [^"\\]  .  (group)  name
//   x*  x+  x?  x{m}  x{m,}  x{m,n}  x{,n}     a | b     # comment
// with \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH escapes. A rule goes on
// over line breaks until the next `name ::=`. Errors (shoal::Error) name the
// line and column; a rule used but never defined, and left recursion (a rule
// that can reach itself before reading a character), are refused up front.
#include <string_view>

#include "grammar/grammar.h"

namespace shoal::grammar {

Grammar parse_gbnf(std::string_view text);

}  // namespace shoal::grammar
