// Vocabulary loading and encode/decode rules on small hand-made vocabularies,
// serialized as GGUF in memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "gguf/reader.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace shoal {
namespace {

// Writes GGUF v3 metadata (no tensors).
class GgufBuilder {
 public:
  void string(const std::string& key, const std::string& value) {
    header(key, 8);
    put_string(value);
    ++count_;
  }
  void u32(const std::string& key, uint32_t value) {
    header(key, 4);
    put(value);
    ++count_;
  }
  void boolean(const std::string& key, bool value) {
    header(key, 7);
    put<uint8_t>(value ? 1 : 0);
    ++count_;
  }
  void strings(const std::string& key, const std::vector<std::string>& values) {
    array_header(key, 8, values.size());
    for (const auto& v : values) put_string(v);
  }
  void floats(const std::string& key, const std::vector<float>& values) {
    array_header(key, 6, values.size());
    for (float v : values) put(v);
  }
  void ints(const std::string& key, const std::vector<int32_t>& values) {
    array_header(key, 5, values.size());
    for (int32_t v : values) put(v);
  }
  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    auto append = [&out](const auto& v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      out.insert(out.end(), p, p + sizeof(v));
    };
    append(uint32_t{3});
    append(uint64_t{0});
    append(count_);
    out.insert(out.end(), body_.begin(), body_.end());
    while (out.size() % 32 != 0) out.push_back(0);
    return out;
  }

 private:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    body_.insert(body_.end(), p, p + sizeof(v));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void header(const std::string& key, uint32_t type) {
    put_string(key);
    put(type);
  }
  void array_header(const std::string& key, uint32_t type, size_t n) {
    header(key, 9);
    put(type);
    put<uint64_t>(n);
    ++count_;
  }
  std::vector<uint8_t> body_;
  uint64_t count_ = 0;
};

struct Loaded {
  std::vector<uint8_t> bytes;  // must outlive the file
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
};

std::unique_ptr<Loaded> load(const GgufBuilder& b) {
  auto l = std::make_unique<Loaded>();
  l->bytes = b.build();
  l->file = gguf::File::parse(l->bytes.data(), l->bytes.size(), "test.gguf");
  l->tok = Tokenizer::from_gguf(*l->file);
  return l;
}

const std::string kSp = "\xE2\x96\x81";  // U+2581

// A SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, a few pieces,
// a user-defined and a control token.
GgufBuilder spm_vocab(const std::string& name = "") {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  for (const std::string& t : {kSp, std::string("a"), std::string("b"), kSp + "a", std::string("ab"), kSp + "ab"}) {
    tokens.push_back(t);
    types.push_back(1);
  }
  tokens.push_back("<tool>");  // user-defined
  types.push_back(4);
  tokens.push_back("<|turn|>");  // control
  types.push_back(3);
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 259; i < 265; ++i) scores[i] = -static_cast<float>(i - 258);  // shorter pieces first
  scores[264] = 10.0f;                                                        // "▁ab" wins
  GgufBuilder b;
  b.string("tokenizer.ggml.model", "llama");
  if (!name.empty()) b.string("general.name", name);
  b.strings("tokenizer.ggml.tokens", tokens);
  b.floats("tokenizer.ggml.scores", scores);
  b.ints("tokenizer.ggml.token_type", types);
  b.u32("tokenizer.ggml.bos_token_id", 1);
  b.u32("tokenizer.ggml.eos_token_id", 2);
  b.u32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);  // "none", out of range: ignored
  return b;
}

TEST(TokenizerVocab, SpmMergesAndByteFallback) {
  auto l = load(spm_vocab());
  Tokenizer& tok = *l->tok;
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_TRUE(tok.add_bos());
  const TokenId sp_ab = *tok.find_token(kSp + "ab");
  EXPECT_EQ(tok.encode("ab", false, false), std::vector<TokenId>{sp_ab});
  EXPECT_EQ(tok.encode("ab", true, false), (std::vector<TokenId>{1, sp_ab}));
  // "é" is no piece: its two bytes come out as byte tokens.
  EXPECT_EQ(tok.encode("\xC3\xA9", false, false),
            (std::vector<TokenId>{*tok.find_token(kSp), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.token_to_piece(3 + 0x41), "A");
  EXPECT_EQ(tok.token_to_piece(sp_ab), " ab");
  EXPECT_EQ(tok.decode(tok.encode("ab \xC3\xA9", true, false)), " ab \xC3\xA9");  // the BOS takes the strip
  EXPECT_EQ(tok.decode(tok.encode("ab \xC3\xA9", false, false)), "ab \xC3\xA9");
}

TEST(TokenizerVocab, SpecialTokensNeedParseSpecialUnlessUserDefined) {
  auto l = load(spm_vocab());
  Tokenizer& tok = *l->tok;
  const TokenId tool = *tok.find_token("<tool>");
  const TokenId turn = *tok.find_token("<|turn|>");
  const TokenId sp_ab = *tok.find_token(kSp + "ab");
  const TokenId ab = *tok.find_token("ab");
  // User-defined tokens are always cut out; the text after a special token
  // gets the SPM prefix space again.
  EXPECT_EQ(tok.encode("ab<tool>ab", false, false), (std::vector<TokenId>{sp_ab, tool, sp_ab}));
  EXPECT_EQ(tok.encode("<|turn|>ab", false, true), (std::vector<TokenId>{turn, sp_ab}));
  const std::vector<TokenId> plain = tok.encode("<|turn|>ab", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), turn), plain.end());
  EXPECT_EQ(tok.token_to_piece(turn), "");
  EXPECT_EQ(tok.token_to_piece(turn, true), "<|turn|>");
  EXPECT_EQ(tok.token_to_piece(tool), "<tool>");  // user-defined always renders
  EXPECT_EQ(tok.decode({turn, ab}), "ab");
  EXPECT_EQ(tok.decode({turn, ab}, true), "<|turn|>ab");
}

TEST(TokenizerVocab, Phi3SpecialTokensSwallowFollowingWhitespace) {
  auto l = load(spm_vocab("Phi-3 mini"));
  Tokenizer& tok = *l->tok;
  const TokenId turn = *tok.find_token("<|turn|>");
  EXPECT_EQ(tok.encode("<|turn|> \n ab", false, true), (std::vector<TokenId>{turn, *tok.find_token(kSp + "ab")}));
}

TEST(TokenizerVocab, EndOfGeneration) {
  auto l = load(spm_vocab());
  EXPECT_TRUE(l->tok->is_end_of_generation(2));
  EXPECT_FALSE(l->tok->is_end_of_generation(1));
  EXPECT_FALSE(l->tok->is_end_of_generation(-1));
}

// Fill-in-the-middle markers come from the metadata (the current keys or
// the older prefix/suffix/middle names), and none is made up where neither
// names one and no token has a marker's text.
TEST(TokenizerVocab, FillInTheMiddleTokens) {
  auto none = load(spm_vocab());
  EXPECT_EQ(none->tok->vocab().fim_pre(), kNoToken);
  EXPECT_EQ(none->tok->vocab().fim_suf(), kNoToken);
  EXPECT_EQ(none->tok->vocab().fim_mid(), kNoToken);
  GgufBuilder b = spm_vocab();
  b.u32("tokenizer.ggml.fim_pre_token_id", 260);
  b.u32("tokenizer.ggml.fim_suf_token_id", 261);
  b.u32("tokenizer.ggml.middle_token_id", 262);
  auto named = load(b);
  EXPECT_EQ(named->tok->vocab().fim_pre(), 260);
  EXPECT_EQ(named->tok->vocab().fim_suf(), 261);
  EXPECT_EQ(named->tok->vocab().fim_mid(), 262);
}

TEST(TokenizerVocab, BadIdsThrow) {
  auto l = load(spm_vocab());
  EXPECT_THROW(l->tok->token_to_piece(-1), Error);
  EXPECT_THROW(l->tok->token_to_piece(l->tok->n_vocab()), Error);
  EXPECT_THROW(l->tok->token_text(1 << 30), Error);
  EXPECT_THROW(l->tok->decode({0, 99999}), Error);
}

// A byte-level BPE vocabulary: the 256 byte characters plus merges.
GgufBuilder bpe_vocab(const std::string& pre, const std::vector<std::string>& extra,
                      const std::vector<std::string>& merges) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_level_char(static_cast<uint8_t>(b)));
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  GgufBuilder g;
  g.string("tokenizer.ggml.model", "gpt2");
  g.string("tokenizer.ggml.pre", pre);
  g.strings("tokenizer.ggml.tokens", tokens);
  g.strings("tokenizer.ggml.merges", merges);
  return g;
}

TEST(TokenizerVocab, BpeAppliesMergesByRank) {
  // "Ġa" + "b" must not merge before "a b" (rank 0) does.
  auto l = load(bpe_vocab("gpt-2", {"ab", "\xC4\xA0" "a", "\xC4\xA0" "ab"}, {"a b", "\xC4\xA0 a", "\xC4\xA0 ab"}));
  Tokenizer& tok = *l->tok;
  EXPECT_EQ(tok.encode(" ab", false, false), std::vector<TokenId>{258});
  EXPECT_EQ(tok.encode("ab", false, false), std::vector<TokenId>{256});
  EXPECT_EQ(tok.encode(" a", false, false), std::vector<TokenId>{257});
  EXPECT_EQ(tok.encode("ba", false, false), (std::vector<TokenId>{'b' , 'a'}));  // byte chars keep their ids
  EXPECT_EQ(tok.token_to_piece(258), " ab");
  EXPECT_EQ(tok.token_to_piece(0), std::string(1, '\0'));  // U+0100 stands for byte 0
  // Invalid UTF-8 is read as U+FFFD, as llama.cpp does.
  EXPECT_EQ(tok.decode(tok.encode("\xFF", false, false)), "\xEF\xBF\xBD");
  EXPECT_EQ(tok.bos(), 11);  // llama.cpp's default for BPE vocabularies without one
}

TEST(TokenizerVocab, UnknownPreTokenizerIsRefusedByName) {
  GgufBuilder g = bpe_vocab("no-such-pre", {}, {"a b"});
  try {
    load(g);
    FAIL() << "expected shoal::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-pre'"), std::string::npos) << e.what();
  }
}

TEST(TokenizerVocab, BrokenVocabulariesAreRefused) {
  GgufBuilder unknown_model;
  unknown_model.string("tokenizer.ggml.model", "bert");
  unknown_model.strings("tokenizer.ggml.tokens", {"a"});
  EXPECT_THROW(load(unknown_model), Error);

  GgufBuilder duplicate;
  duplicate.string("tokenizer.ggml.model", "llama");
  duplicate.strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "a"});
  EXPECT_THROW(load(duplicate), Error);

  GgufBuilder no_tokens;
  no_tokens.string("tokenizer.ggml.model", "llama");
  EXPECT_THROW(load(no_tokens), Error);

  GgufBuilder no_merges;
  no_merges.string("tokenizer.ggml.model", "gpt2");
  no_merges.string("tokenizer.ggml.pre", "gpt-2");
  no_merges.strings("tokenizer.ggml.tokens", {"a", "b"});
  EXPECT_THROW(load(no_merges), Error);

  // add_bos with no BOS in range (the BPE default, 11, is past the end).
  GgufBuilder no_bos;
  no_bos.string("tokenizer.ggml.model", "gpt2");
  no_bos.string("tokenizer.ggml.pre", "gpt-2");
  no_bos.strings("tokenizer.ggml.tokens", {"a", "b"});
  no_bos.strings("tokenizer.ggml.merges", {"a b"});
  no_bos.boolean("tokenizer.ggml.add_bos_token", true);
  EXPECT_THROW(load(no_bos), Error);

  GgufBuilder short_scores;
  short_scores.string("tokenizer.ggml.model", "llama");
  short_scores.strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  short_scores.floats("tokenizer.ggml.scores", {0.0f, 0.0f});
  EXPECT_THROW(load(short_scores), Error);
}

}  // namespace
}  // namespace shoal
