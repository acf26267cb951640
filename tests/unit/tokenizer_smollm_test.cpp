// SmolLM2-135M-Instruct: byte-level BPE with the "smollm" pre-tokenizer
// (single digits) and ChatML control tokens. Expected ids come from Hugging
// Face `tokenizers` built from the same GGUF vocabulary and merges
// (Digits(individual_digits) + ByteLevel pre-tokenizers, control tokens as
// special added tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8_stream.h"
#include "test_files.h"

namespace shoal {
namespace {

class TokenizerSmolLM : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::models_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    SHOAL_NEED_FILE(path);
    file_ = gguf::File::open(path);
    tok_ = Tokenizer::from_gguf(*file_);
  }
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TokenizerSmolLM, Metadata) {
  EXPECT_EQ(tok_->n_vocab(), 49152);
  EXPECT_EQ(tok_->vocab().pre(), "smollm");
  EXPECT_EQ(tok_->bos(), 1);
  EXPECT_EQ(tok_->eos(), 2);
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_FALSE(tok_->add_eos());
  EXPECT_FALSE(tok_->vocab().clean_spaces());
  EXPECT_EQ(tok_->find_token("<|im_start|>"), std::optional<TokenId>(1));
  EXPECT_EQ(tok_->find_token("<|im_end|>"), std::optional<TokenId>(2));
}

TEST_F(TokenizerSmolLM, ChatMarkupParsesSpecialTokens) {
  const std::string text = "<|im_start|>user\nHello<|im_end|>\n";
  EXPECT_EQ(tok_->encode(text, true, true), (std::vector<TokenId>{1, 4093, 198, 19556, 2, 198}));
  // Without parse_special the markup is plain text.
  const std::vector<TokenId> plain = tok_->encode(text, false, false);
  EXPECT_GT(plain.size(), 6u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok_->decode(plain), text);
}

TEST_F(TokenizerSmolLM, MatchesHuggingFace) {
  const std::pair<std::string, std::vector<TokenId>> cases[] = {
      {"Hello world", {19556, 905}},
      {" Hello, world! It's 2024.", {38699, 28, 905, 17, 657, 506, 216, 34, 32, 34, 36, 30}},
      {"The year 1987 was 12345 days", {504, 713, 216, 33, 41, 40, 39, 436, 216, 33, 34, 35, 36, 37, 2009}},
      {"\xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 \xE2\x9C\x93 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\xA6\x99",
       {142, 246, 94, 25972, 83, 7466, 84, 2756, 4636, 246, 237, 17097, 241, 115, 40993, 179, 120, 248, 15107, 116, 243}},
      {"  multiple   spaces\n\n\ttab", {216, 2701, 256, 5600, 1116, 197, 15999}},
      {"I'm you're we've they'll she'd", {57, 5248, 346, 2316, 392, 3543, 502, 3060, 1041, 6737}},
      {"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
       "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
       {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182,
        2, 198, 1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 9531, 198}},
  };
  for (const auto& [text, ids] : cases) {
    const std::vector<TokenId> got = tok_->encode(text, false, true);
    EXPECT_EQ(got, ids) << text;
    EXPECT_EQ(tok_->decode(got, true), text);
  }
}

TEST_F(TokenizerSmolLM, EndOfGeneration) {
  EXPECT_TRUE(tok_->is_end_of_generation(2));  // <|im_end|>, also eos
  EXPECT_TRUE(tok_->is_end_of_generation(0));  // <|endoftext|>
  EXPECT_FALSE(tok_->is_end_of_generation(1));
  EXPECT_FALSE(tok_->is_end_of_generation(19556));
  EXPECT_EQ(tok_->token_to_piece(2), "");
  EXPECT_EQ(tok_->token_to_piece(2, true), "<|im_end|>");
}

TEST_F(TokenizerSmolLM, StreamsPiecesAsValidUtf8) {
  const std::string text = "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\xA6\x99 ok";
  Utf8Stream stream;
  std::string streamed;
  for (TokenId id : tok_->encode(text, false, false)) streamed += stream.push(tok_->token_to_piece(id));
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
}

}  // namespace
}  // namespace shoal
