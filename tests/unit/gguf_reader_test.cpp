// The GGUF reader on the real test files, and its refusals on broken ones.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "util/error.h"

namespace shoal::gguf {
namespace {

const std::string kShared = SHOAL_SHARED_DIR;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    File::parse(bytes.data(), bytes.size(), "test.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GgufReader, ReadsStories260K) {
  auto f = File::open(kShared + "/models/stories260K.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.block_count"), 5);
  EXPECT_EQ(f->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").size(), 512u);
  const TensorInfo& emb = f->tensor("token_embd.weight");
  EXPECT_EQ(emb.type, DType::F32);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb.bytes, 64u * 512u * 4u);
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
  EXPECT_THROW(f->tensor("nope"), Error);
}

TEST(GgufReader, ReadsF16TinyRandom) {
  auto f = File::open(kShared + "/models/llama-2-tiny-random.gguf");
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight").type, DType::F16);
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").size(), 32000u);
}

TEST(GgufReader, RefusesRowsThatAreNotWholeBlocks) {
  std::string msg = parse_error(read_bytes(kShared + "/models/invalid/tinyllamas-stories-260k-q8_0.gguf"));
  EXPECT_NE(msg.find("ffn_down"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a multiple"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset"), std::string::npos) << msg;
}

TEST(GgufReader, RefusesBadMagicAndVersion) {
  auto bytes = read_bytes(kShared + "/models/stories260K.gguf");
  auto bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(parse_error(bad).find("bad magic"), std::string::npos);
  bad = bytes;
  bad[4] = 1;
  EXPECT_NE(parse_error(bad).find("unsupported GGUF version 1"), std::string::npos);
  bad = bytes;
  bad[4] = 99;
  EXPECT_NE(parse_error(bad).find("version 99"), std::string::npos);
}

TEST(GgufReader, RefusesAbsurdCounts) {
  auto bytes = read_bytes(kShared + "/models/stories260K.gguf");
  auto bad = bytes;
  for (int i = 8; i < 16; ++i) bad[i] = 0xff;  // tensor count
  EXPECT_NE(parse_error(bad).find("tensor count"), std::string::npos);
  bad = bytes;
  for (int i = 16; i < 24; ++i) bad[i] = 0x7f;  // metadata count
  EXPECT_NE(parse_error(bad).find("metadata count"), std::string::npos);
}

TEST(GgufReader, RefusesEveryTruncation) {
  auto bytes = read_bytes(kShared + "/models/stories260K.gguf");
  // Every cut inside the header and a spread of cuts through the data.
  for (size_t cut = 0; cut < bytes.size(); cut += (cut < 20000 ? 7 : 40000)) {
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + cut);
    EXPECT_FALSE(parse_error(part).empty()) << "cut at " << cut;
  }
}

TEST(GgufReader, SurvivesBitFlips) {
  // Corrupted copies must parse or throw shoal::Error — never crash (this
  // test is also run under ASan/UBSan).
  std::mt19937 rng(1234);
  for (const char* name : {"/models/stories260K.gguf", "/models/llama-2-tiny-random.gguf",
                           "/tokenizer-vectors/ggml-vocab-gpt-2.gguf"}) {
    auto bytes = read_bytes(kShared + name);
    size_t header = std::min<size_t>(bytes.size(), 4096);
    for (int trial = 0; trial < 300; ++trial) {
      auto bad = bytes;
      int flips = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < flips; ++k) {
        size_t at = trial % 2 ? rng() % header : rng() % bad.size();
        bad[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      }
      try {
        auto f = File::parse(bad.data(), bad.size(), "flipped.gguf");
        for (const auto& t : f->tensors()) ASSERT_LE(t.data + t.bytes, bad.data() + bad.size());
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace shoal::gguf
