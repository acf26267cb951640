// llama.cpp's own tokenizer test vectors (test-tokenizer-0): every input must
// encode to exactly the reference ids, called as test-tokenizer-0 calls it
// (common_tokenize with add_special = false, parse_special = false).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"
#include "test_files.h"

namespace shoal {
namespace {

const std::string kVectorDir = testing::test_data_dir() + "/tokenizer-vectors/";

struct Case {
  std::string text;
  std::vector<TokenId> ids;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The .inp file holds the inputs separated by "\n__ggml_vocab_test__\n"; the
// .out file holds one line of ids per input (llama.cpp read_tests).
std::vector<Case> read_cases(const std::string& vocab) {
  const std::string raw = read_file(vocab + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(vocab + ".out");
  std::vector<Case> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    if (i >= inputs.size()) break;
    Case c{inputs[i], {}};
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), inputs.size()) << "the .inp and .out files disagree on the number of tests";
  return cases;
}

std::string printable(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

void expect_vectors(const std::string& name) {
  const std::string path = kVectorDir + name;
  SHOAL_NEED_FILE(path);
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*file);
  const std::vector<Case> cases = read_cases(path);
  ASSERT_GT(cases.size(), 30u);
  for (const Case& c : cases) {
    EXPECT_EQ(tok->encode(c.text, false, false), c.ids) << "input: '" << printable(c.text) << "'";
  }
}

// decode(encode(x)) gives x back, except where llama.cpp's detokenizer
// changes the text on purpose: BPE vocabularies with clean-up of
// tokenization spaces drop the space in " ," " ." " ?" " !" " 's" ...
void expect_round_trips(const std::string& name, bool clean_spaces) {
  const std::string path = kVectorDir + name;
  SHOAL_NEED_FILE(path);
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*file);
  EXPECT_EQ(tok->vocab().clean_spaces(), clean_spaces);
  int checked = 0;
  for (const Case& c : read_cases(path)) {
    if (clean_spaces) {
      bool cleaned = false;
      for (const char* s : {" ?", " !", " .", " ,", " '"}) cleaned |= c.text.find(s) != std::string::npos;
      if (cleaned) continue;
    }
    EXPECT_EQ(tok->decode(tok->encode(c.text, false, false)), c.text) << "input: '" << printable(c.text) << "'";
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

TEST(TokenizerVectors, LlamaSpmEncodesLikeLlamaCpp) { expect_vectors("ggml-vocab-llama-spm.gguf"); }
TEST(TokenizerVectors, Gpt2EncodesLikeLlamaCpp) { expect_vectors("ggml-vocab-gpt-2.gguf"); }
TEST(TokenizerVectors, LlamaSpmRoundTrips) { expect_round_trips("ggml-vocab-llama-spm.gguf", false); }
TEST(TokenizerVectors, Gpt2RoundTrips) { expect_round_trips("ggml-vocab-gpt-2.gguf", true); }
// Gemma 4's kind of BPE (raw UTF-8, spaces as U+2581, <0xXX> bytes, only
// newlines split apart), on a small vocabulary of that kind
// (tests/models/make_gemma4_vocab.py) and llama.cpp's ids for it.
TEST(TokenizerVectors, Gemma4BpeEncodesLikeLlamaCpp) { expect_vectors("shoal-vocab-gemma4-bpe.gguf"); }
TEST(TokenizerVectors, Gemma4BpeRoundTrips) { expect_round_trips("shoal-vocab-gemma4-bpe.gguf", true); }

TEST(TokenizerVectors, Gpt2CleansUpSpacesLikeLlamaCpp) {
  const std::string path = kVectorDir + "ggml-vocab-gpt-2.gguf";
  SHOAL_NEED_FILE(path);
  auto file = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*file);
  EXPECT_EQ(tok->decode(tok->encode("Hello , world ! It 's you ' re . ok ?", false, false)),
            "Hello, world! It's you're. ok?");
}

// Arbitrary bytes, invalid UTF-8 included: neither tokenizer may produce an
// id outside the vocabulary. SPM falls back to byte tokens and gives the bytes
// back, except (as in llama.cpp) where an invalid lead byte swallows part of
// the U+2581 that stands for a space, so the round trip leaves spaces out.
TEST(TokenizerVectors, ArbitraryBytes) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 64);
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
    const std::string path = kVectorDir + name;
    SHOAL_NEED_FILE(path);
    auto file = gguf::File::open(path);
    auto tok = Tokenizer::from_gguf(*file);
    const bool spm = tok->vocab().type() == VocabType::kSpm;
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      for (int n = length(rng); n > 0; --n) {
        const int b = byte(rng);
        text += static_cast<char>(b == ' ' ? 'x' : b);
      }
      const std::vector<TokenId> ids = tok->encode(text, false, true);
      for (TokenId id : ids) {
        ASSERT_TRUE(id >= 0 && id < tok->n_vocab()) << name;
      }
      if (spm) {
        EXPECT_EQ(tok->decode(ids), text) << name;
      }
    }
  }
}

}  // namespace
}  // namespace shoal
