// libFuzzer: bytes as a request's `grammar` (GBNF any client may send): the
// first line-break-free part after a NUL, if any, is fed to the matcher as
// generated text, a byte at a time, and the mask is walked over a small
// trie. Nothing may crash or hang (each step is bounded by the matcher's
// work budget); a bad or too costly grammar is a shoal::Error. The mutator
// (structure_mutator.h) grows chains of rules reached many ways over.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "grammar/byte_trie.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar_matcher.h"
#include "structure_mutator.h"
#include "util/error.h"

using namespace std::string_view_literals;

namespace shoal::fuzz {

const std::vector<std::string_view> kFragments = {
    "root ::= ", "r0", " | ", "*", "+", "?", "{0,100}", "{1000}", "(", ")", "\"x\"", "[a-z]", "[^\"]", ".",
    "\n", "\0xxxxxxxxxxxxxxxx"sv, " r0 r0", "( r0 | r0 )*", "# c\n"};

// A chain of rules `depth` long, each its successor through a random mix
// of the ambiguous shapes (twice, twice with different tails, repeated).
std::string deep_shape(std::mt19937& rng, int depth) {
  depth = std::min(depth, 2000);
  const int kind = static_cast<int>(rng() % 4);
  std::string out = kind == 3 ? "\nroot ::= q0*\n" : "\nroot ::= q0\n";
  for (int i = 0; i < depth; ++i) {
    switch (kind) {
      case 0: out += fmt::format("q{} ::= q{} | q{}\n", i, i + 1, i + 1); break;
      case 1: out += fmt::format("q{} ::= q{} \"a\" | q{} \"b\"\n", i, i + 1, i + 1); break;
      default: out += fmt::format("q{} ::= q{} | q{} | \"\"\n", i, i + 1, i + 1); break;
    }
  }
  return out + fmt::format("q{} ::= \"x\"\n", depth) + std::string(1, '\0') + "xxxxxxxx";
}

}  // namespace shoal::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string gbnf = input.substr(0, split);
  // At most 1024 bytes of text: each byte is one matcher step, bounded by its
  // work budget, so a run's time grows with the text; a longer one only
  // outlasts -timeout under the sanitizers (25 KB of an ambiguous chain took
  // 2.1 s at -O2, its first 4 KB 7.8 s with ASan) without reaching anything new.
  const std::string text = split == std::string::npos ? "" : input.substr(split + 1, 1024);
  static const shoal::grammar::ByteTrie trie({"{", "\"", "a", "ab", "\xC3", "\xA9", "\xC3\xA9", " ", "\n", "0", "}", "x"});
  try {
    auto g = std::make_shared<const shoal::grammar::Grammar>(shoal::grammar::parse_gbnf(gbnf));
    shoal::grammar::GrammarMatcher m(g);
    std::vector<uint8_t> allowed(16);
    for (char c : text) {
      m.allowed_tokens(trie, allowed);
      if (!m.accept(std::string(1, c))) break;
      m.accepting();
    }
  } catch (const shoal::Error&) {
  }
  return 0;
}
