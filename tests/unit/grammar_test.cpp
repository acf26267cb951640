// GBNF parsing, matching, and the token mask: the trie walk must allow
// exactly the tokens that one-by-one matching allows, on a real vocabulary.
#include <gtest/gtest.h>

#include <memory>

#include "gguf/reader.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar_matcher.h"
#include "test_files.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace shoal::grammar {
namespace {

std::shared_ptr<const Grammar> compile(const std::string& gbnf) {
  return std::make_shared<const Grammar>(parse_gbnf(gbnf));
}

// Whether `text` is a whole match of the grammar.
bool matches(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m(compile(gbnf));
  return m.accept(text) && m.accepting();
}

std::string error_of(const std::string& gbnf) {
  try {
    parse_gbnf(gbnf);
  } catch (const shoal::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gbnf, LiteralsClassesAndAlternatives) {
  const std::string g = R"(root ::= ("yes" | "no") [.!]?  # an answer
)";
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "no!"));
  EXPECT_FALSE(matches(g, "maybe"));
  EXPECT_FALSE(matches(g, "ye"));  // a prefix is not a whole match
  EXPECT_FALSE(matches(g, "yes.."));
}

TEST(Gbnf, RepetitionsAreBounded) {
  const std::string g = "root ::= [a-c]{2,4} \"x\"* [0-9]+\n";
  EXPECT_TRUE(matches(g, "ab1"));
  EXPECT_TRUE(matches(g, "abcaxxx42"));
  EXPECT_FALSE(matches(g, "a1"));
  EXPECT_FALSE(matches(g, "abcab1"));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_TRUE(matches("root ::= \"a\"{3}\n", "aaa"));
  EXPECT_FALSE(matches("root ::= \"a\"{3}\n", "aaaa"));
  EXPECT_TRUE(matches("root ::= \"a\"{,2} \"b\"\n", "b"));
}

TEST(Gbnf, RulesOverLinesRecursionAndEscapes) {
  const std::string g = R"(root ::=
    list
list ::= "[" (item ("," item)*)? "]"
item ::= [0-9] | list
esc ::= "\x41\u00e9\t\"")";
  EXPECT_TRUE(matches(g, "[1,[2,[]],3]"));
  EXPECT_FALSE(matches(g, "[1,]"));
  EXPECT_TRUE(matches("root ::= \"\\x41\\u00e9\\t\\\"\"\n", "A\xC3\xA9\t\""));
  EXPECT_TRUE(matches("root ::= [^a-z]+\n", "XYZ\xE2\x82\xAC"));
  EXPECT_FALSE(matches("root ::= [^a-z]+\n", "XyZ"));
  EXPECT_TRUE(matches("root ::= .\n", "\xF0\x9F\x98\x80"));
}

TEST(Gbnf, ACharacterSplitAcrossTokensWaits) {
  GrammarMatcher m(compile("root ::= \"\xC3\xA9\" | \"\xC3\xA8x\"\n"));
  EXPECT_TRUE(m.accept("\xC3"));  // half of é or è
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.accept("\xA0"));  // à is in neither
  EXPECT_TRUE(m.accept("\xA9"));
  EXPECT_TRUE(m.finished());
  GrammarMatcher ascii(compile("root ::= [a-z]*\n"));
  EXPECT_FALSE(ascii.accept("\xC3"));  // no set takes a character from there
  EXPECT_FALSE(ascii.accept("\xA9"));  // a continuation byte alone is no UTF-8
  // Overlong forms of "c" (a model wrote C1 A3 inside a JSON key), a
  // surrogate and a code point beyond Unicode are not characters.
  for (const char* bad : {"\xC1\xA3", "\xE0\x81\xA3", "\xF0\x80\x81\xA3", "\xED\xA0\x80", "\xF4\x90\x80\x80"}) {
    GrammarMatcher any(compile("root ::= .*\n"));
    EXPECT_FALSE(any.accept(bad)) << bad;
  }
  // A lead byte is only the start of characters at least as large as its
  // length spells: E0 (U+0800 and up) is no start of a '"'.
  GrammarMatcher quote(compile("root ::= \"\\\"\" [a-z]*\n"));
  EXPECT_FALSE(quote.accept("\xE0"));
  EXPECT_FALSE(quote.accept("\xF0"));
  GrammarMatcher narrow(compile("root ::= [^\\u0800-\\uFFFF]\n"));  // no 3-byte character
  EXPECT_FALSE(narrow.accept("\xE4"));
  EXPECT_TRUE(narrow.accept("\xF0"));
  GrammarMatcher any(compile("root ::= .*\n"));
  EXPECT_TRUE(any.accept("\xE0\xA0\x80\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\xEF\xBF\xBF"));
}

TEST(Gbnf, ErrorsNameTheLineAndTheRule) {
  EXPECT_NE(error_of("root ::= foo\n").find("'foo' is used but never defined"), std::string::npos);
  EXPECT_NE(error_of("x ::= \"a\"\n").find("no `root` rule"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\n\nroot ::= \"b\"").find("line 3, column 1"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"abc\n").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("root ::= [z-a]").find("backwards"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{5,2}").find("below its minimum"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{99999999}").find("above"), std::string::npos);
  EXPECT_NE(error_of("root ::= root \"a\" | \"b\"").find("'root' is left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= e x\ne ::= \"\" | \"a\"\nx ::= root | \"b\"").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"?)*").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= <[1]>").find("not supported"), std::string::npos);
  EXPECT_NE(error_of("root ::= " + std::string(300, '(')).find("nested"), std::string::npos);
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
}

TEST(Gbnf, ALongChainOfRulesIsFollowedWithoutRecursion) {
  // Each rule is the next: the stack never grows, and expansion is a loop.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 50000; ++i) chain += fmt::format("r{} ::= r{}\n", i, i + 1);
  chain += "r50000 ::= \"x\"\n";
  GrammarMatcher m(compile(chain));  // parsed and expanded without recursion
  EXPECT_TRUE(m.accept("x"));
  EXPECT_TRUE(m.finished());
  // Each rule leaves something behind it: the stack grows a position a
  // rule, and a chain deeper than the bound is refused, not followed.
  std::string growing = "root ::= r0\n";
  for (int i = 0; i < 5000; ++i) growing += fmt::format("r{} ::= r{} \"y\"\n", i, i + 1);
  growing += "r5000 ::= \"x\"\n";
  EXPECT_THROW(GrammarMatcher{compile(growing)}, shoal::Error);
}

TEST(Gbnf, RulesReachedManyWaysAreExpandedOnce) {
  // 872 bytes from an adversarial pass: each rule is its successor twice,
  // forty deep. Expanding every path is 2^40 steps; each distinct stack
  // once, forty.
  std::string doubled = "root ::= r0\n";
  for (int i = 0; i < 40; ++i) doubled += fmt::format("r{} ::= r{} | r{}\n", i, i + 1, i + 1);
  doubled += "r40 ::= \"x\"\n";
  GrammarMatcher m(compile(doubled));
  EXPECT_TRUE(m.accept("x"));
  EXPECT_TRUE(m.finished());
  // Repeated, and mid-reply: the same each character.
  std::string repeated = "root ::= r0*\n";
  for (int i = 0; i < 20; ++i) repeated += fmt::format("r{} ::= r{} | r{}\n", i, i + 1, i + 1);
  repeated += "r20 ::= \"x\"\n";
  GrammarMatcher r(compile(repeated));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(r.accept("x"));
}

TEST(Gbnf, AGrammarPastTheWorkBoundIsStoppedByName) {
  // Distinct stacks at every level (each path leaves a different letter
  // behind), so nothing is shared: 2^40 readings of the first character.
  std::string branching = "root ::= r0\n";
  for (int i = 0; i < 40; ++i) branching += fmt::format("r{} ::= r{} \"a\" | r{} \"b\"\n", i, i + 1, i + 1);
  branching += "r40 ::= \"x\"\n";
  try {
    GrammarMatcher m(compile(branching));
    FAIL() << "expanded";
  } catch (const shoal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("grammar"), std::string::npos) << e.what();
  }
}

TEST(Gbnf, AnAmbiguousGrammarIsStoppedNotLeftToGrow) {
  // After n a's, each of 2^n mixes of closing b's and c's is still to come.
  GrammarMatcher m(compile("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"\n"));
  EXPECT_THROW(
      {
        for (int i = 0; i < 64; ++i) m.accept("a");
      },
      shoal::Error);
}

// The mask from the trie walk against the tokens one by one, at several
// points of a JSON-ish grammar, on SmolLM2's 49k-token and Qwen2.5's
// 151k-token vocabularies.
class GrammarMask : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Models, GrammarMask,
                         ::testing::Values("SmolLM2-135M-Instruct.Q4_1.gguf", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"));

TEST_P(GrammarMask, TrieWalkEqualsTokenByToken) {
  const std::string path = testing::models_dir() + "/" + GetParam();
  SHOAL_NEED_FILE(path);
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*file);
  const auto g = compile(R"(root ::= "{" ws "\"name\"" ws ":" ws str ws "," ws "\"n\":" ws [0-9]+ ws "}"
ws ::= [ \n]{0,3}
str ::= "\"" ([^"\\] | "\\" ["\\n])* "\""
)");
  for (const std::string prefix : {"", "{", "{\n  \"", "{ \"na", "{\"name\": \"h\xC3", "{\"name\":\"hi there", "{\"name\":\"x\", \"n\": 12"}) {
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept(prefix)) << prefix;
    std::vector<uint8_t> walked(static_cast<size_t>(tok->n_vocab()), 0);
    m.allowed_tokens(tok->piece_trie(), walked);
    size_t n = 0;
    for (TokenId id = 0; id < tok->n_vocab(); ++id) {
      const std::string piece = tok->is_control(id) ? "" : tok->token_to_piece(id);
      GrammarMatcher one = m;
      const bool expected = !piece.empty() && one.accept(piece);
      ASSERT_EQ(walked[static_cast<size_t>(id)] != 0, expected) << "prefix '" << prefix << "' token " << id << " '"
                                                                 << piece << "'";
      n += expected;
    }
    EXPECT_GT(n, 0u) << prefix;
  }
}

}  // namespace
}  // namespace shoal::grammar
