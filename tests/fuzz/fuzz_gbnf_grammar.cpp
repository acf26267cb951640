// libFuzzer: bytes as a request's `grammar` (GBNF any client may send): the
// first line-break-free part after a NUL, if any, is fed to the matcher as
// generated text, a byte at a time, and the mask is walked over a small
// trie. Nothing may crash or hang; a bad grammar is a shoal::Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "grammar/byte_trie.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar_matcher.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string gbnf = input.substr(0, split);
  const std::string text = split == std::string::npos ? "" : input.substr(split + 1);
  static const shoal::grammar::ByteTrie trie({"{", "\"", "a", "ab", "\xC3", "\xA9", "\xC3\xA9", " ", "\n", "0", "}"});
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
