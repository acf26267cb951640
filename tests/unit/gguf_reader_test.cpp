// The GGUF reader on the real test files, and its refusals on broken ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "util/error.h"

namespace shoal::gguf {
namespace {

const std::string kTestData = SHOAL_TEST_DATA_DIR;

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
  auto f = File::open(kTestData + "/models/stories260K.gguf");
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
  auto f = File::open(kTestData + "/models/llama-2-tiny-random.gguf");
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight").type, DType::F16);
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").size(), 32000u);
}

TEST(GgufReader, RefusesRowsThatAreNotWholeBlocks) {
  std::string msg = parse_error(read_bytes(kTestData + "/models/invalid/tinyllamas-stories-260k-q8_0.gguf"));
  EXPECT_NE(msg.find("ffn_down"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a multiple"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset"), std::string::npos) << msg;
}

TEST(GgufReader, RefusesBadMagicAndVersion) {
  auto bytes = read_bytes(kTestData + "/models/stories260K.gguf");
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
  auto bytes = read_bytes(kTestData + "/models/stories260K.gguf");
  auto bad = bytes;
  for (int i = 8; i < 16; ++i) bad[i] = 0xff;  // tensor count
  EXPECT_NE(parse_error(bad).find("tensor count"), std::string::npos);
  bad = bytes;
  for (int i = 16; i < 24; ++i) bad[i] = 0x7f;  // metadata count
  EXPECT_NE(parse_error(bad).find("metadata count"), std::string::npos);
}

TEST(GgufReader, RefusesEveryTruncation) {
  auto bytes = read_bytes(kTestData + "/models/stories260K.gguf");
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
    auto bytes = read_bytes(kTestData + name);
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

// A GGUF v3 file with no tensors and one metadata entry, `key`, an array
// of `count` elements of `type`, each `element` (its encoded bytes).
std::vector<uint8_t> one_array_file(const std::string& key, ValueType type, uint64_t count,
                                    const std::vector<uint8_t>& element) {
  std::vector<uint8_t> out;
  auto put = [&](auto v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  };
  put(uint32_t{0x46554747});
  put(uint32_t{3});
  put(uint64_t{0});  // tensors
  put(uint64_t{1});  // metadata entries
  put(uint64_t{key.size()});
  out.insert(out.end(), key.begin(), key.end());
  put(static_cast<uint32_t>(ValueType::ARRAY));
  put(static_cast<uint32_t>(type));
  put(count);
  // One fill when every byte is the same (fast under ASan for 100M elements).
  if (std::all_of(element.begin(), element.end(), [&](uint8_t b) { return b == element[0]; })) {
    out.insert(out.end(), count * element.size(), element[0]);
    return out;
  }
  out.reserve(out.size() + count * element.size());
  for (uint64_t i = 0; i < count; ++i) out.insert(out.end(), element.begin(), element.end());
  return out;
}

TEST(GgufReader, RefusesMetadataPastItsMemoryBound) {
  // 100M u8 values: 100 MB of file, 4.8 GB as Values. Refused before any of
  // it is allocated, naming the key.
  auto bytes = one_array_file("huge", ValueType::UINT8, 100'000'000, {7});
  std::string msg = parse_error(bytes);
  EXPECT_NE(msg.find("'huge'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("256 MiB"), std::string::npos) << msg;
  // Empty strings (8 bytes each in the file, 48 in memory) and empty nested
  // arrays (12 bytes each) hit the same bound.
  std::vector<uint8_t> empty_string(8, 0);
  msg = parse_error(one_array_file("strings", ValueType::STRING, 10'000'000, empty_string));
  EXPECT_NE(msg.find("'strings'"), std::string::npos) << msg;
  std::vector<uint8_t> empty_array(12, 0);  // u8, 0 elements
  msg = parse_error(one_array_file("nested", ValueType::ARRAY, 5'000'000, empty_array));
  EXPECT_NE(msg.find("'nested'"), std::string::npos) << msg;
}

TEST(GgufReader, LoadsTokenizerSizedArrays) {
  // More than any real vocabulary (qwen2.5: 151k tokens, as many merges).
  std::string piece = "\xc4\xa0tokenpiece";  // "Ġtokenpiece", 12 bytes
  std::vector<uint8_t> token = {12, 0, 0, 0, 0, 0, 0, 0};
  token.insert(token.end(), piece.begin(), piece.end());
  auto bytes = one_array_file("tokenizer.ggml.tokens", ValueType::STRING, 300'000, token);
  auto f = File::parse(bytes.data(), bytes.size(), "tokens.gguf");
  auto tokens = f->get_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 300'000u);
  EXPECT_EQ(tokens.back(), piece);
  bytes = one_array_file("tokenizer.ggml.scores", ValueType::FLOAT32, 300'000, {0, 0, 0x80, 0x3f});
  f = File::parse(bytes.data(), bytes.size(), "scores.gguf");
  EXPECT_EQ(f->get_array("tokenizer.ggml.scores").items.at(299'999).as_float("score"), 1.0);
}

}  // namespace
}  // namespace shoal::gguf
