#include <gtest/gtest.h>

#include <random>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace shoal {
namespace {

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  PreTokenizer p(pretokenizer_spec(pre).patterns);
  std::vector<std::string> words;
  for (std::string_view w : p.split(text)) words.emplace_back(w);
  return words;
}

using Words = std::vector<std::string>;

TEST(TokenizerPre, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world's  foo\tbar 123!!"),
            (Words{"Hello", " world", "'s", " ", " foo", "\t", "bar", " 123", "!!"}));
  EXPECT_EQ(split("gpt-2", "a   "), (Words{"a", "   "}));
  EXPECT_EQ(split("gpt-2", ""), Words{});
}

TEST(TokenizerPre, SmolLMSplitsEveryDigit) {
  EXPECT_EQ(split("smollm", "abc 123"), (Words{"abc", " ", "1", "2", "3"}));
  EXPECT_FALSE(pretokenizer_spec("smollm").clean_spaces);
}

TEST(TokenizerPre, Llama3) {
  EXPECT_EQ(split("llama-bpe", "I'M 12345\r\n\n x"), (Words{"I", "'M", " ", "123", "45", "\r\n\n", " x"}));
  const PreTokenizerSpec spec = pretokenizer_spec("llama3");
  EXPECT_TRUE(spec.ignore_merges);
  EXPECT_TRUE(spec.add_bos);
}

TEST(TokenizerPre, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "x 2024"), (Words{"x", " ", "2", "0", "2", "4"}));
}

TEST(TokenizerPre, UnicodeWhitespaceIsWhitespace) {
  // U+3000 (ideographic space) and U+0085 (next line) count as \s, as in llama.cpp.
  EXPECT_EQ(split("gpt-2", "a\xE3\x80\x80\xE3\x80\x80" "b"), (Words{"a", "\xE3\x80\x80", "\xE3\x80\x80", "b"}));
  EXPECT_EQ(split("gpt-2", "a\xC2\x85\xC2\x85" "b"), (Words{"a", "\xC2\x85", "\xC2\x85", "b"}));
}

TEST(TokenizerPre, RewritesWhitespaceClasses) {
  const std::string p = pcre2_pattern(R"(\s+(?!\S)|[^\s\p{L}]|\\s)");
  EXPECT_EQ(p.find("\\s"), p.rfind("\\s"));  // only the escaped backslash + s is left
  EXPECT_NE(p.find("[^\\x{09}-\\x{0D}"), std::string::npos);
  EXPECT_NE(p.find("\\x{3000}"), std::string::npos);
}

TEST(TokenizerPre, UnknownTypeIsRefusedByName) {
  try {
    pretokenizer_spec("frobnicate");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'frobnicate'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("smollm"), std::string::npos);  // lists the supported ones
  }
}

// Whatever the text, the words of every supported pre-tokenizer cover it
// exactly, in order.
TEST(TokenizerPre, WordsCoverRandomText) {
  const std::vector<uint32_t> alphabet = {'a', 'Z', '0', '7', ' ', ' ', '\n', '\r', '\t', '\'', 's', '.', '!', '$',
                                          0xE9, 0x3000, 0x85, 0x65E5, 0x0301, 0x1F999, 0x0663, 0x2028, 0xA0};
  std::mt19937 rng(1234);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> length(0, 40);
  for (const std::string& pre : supported_pretokenizers()) {
    SCOPED_TRACE(pre);
    PreTokenizer p(pretokenizer_spec(pre).patterns);
    for (int trial = 0; trial < 50; ++trial) {
      std::string text;
      for (int n = length(rng); n > 0; --n) append_utf8(alphabet[pick(rng)], text);
      std::string joined;
      for (std::string_view w : p.split(text)) {
        EXPECT_FALSE(w.empty());
        joined += w;
      }
      EXPECT_EQ(joined, text);
    }
  }
}

TEST(TokenizerPre, LongWordsDoNotOverflow) {
  // Look-ahead patterns on one very long word.
  const std::string letters(200000, 'a');
  for (const char* pre : {"gpt-4o", "tekken", "llama3"}) {
    PreTokenizer p(pretokenizer_spec(pre).patterns);
    EXPECT_EQ(p.split(letters).size(), 1u) << pre;
  }
}

}  // namespace
}  // namespace shoal
