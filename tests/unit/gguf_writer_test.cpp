// The GGUF writer, checked by reading its output back with the strict reader.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "temp_dir.h"
#include "util/error.h"

namespace shoal::gguf {
namespace {
namespace fs = std::filesystem;

const std::string kModels = std::string(SHOAL_TEST_DATA_DIR) + "/models";

struct TempDir : shoal::testing::TempDir {
  TempDir() : shoal::testing::TempDir("shoal-writer") {}
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

TEST(GgufWriter, RoundTripsThroughReader) {
  Writer w;
  w.add("u8", Value{ValueType::UINT8, uint64_t{200}});
  w.add("i8", Value{ValueType::INT8, int64_t{-100}});
  w.add("u16", Value{ValueType::UINT16, uint64_t{60000}});
  w.add("i16", Value{ValueType::INT16, int64_t{-30000}});
  w.add("u32", make_u32(4000000000u));
  w.add("i32", make_i32(-2000000000));
  w.add("u64", make_u64(1ull << 60));
  w.add("i64", Value{ValueType::INT64, int64_t{-(1ll << 60)}});
  w.add("f32", make_f32(0.5f));
  w.add("f64", Value{ValueType::FLOAT64, 1.0 / 3.0});
  w.add("bool", make_bool(true));
  w.add("str", make_string("héllo\nworld"));
  w.add("strs", make_string_array({"a", "", "ccc"}));
  w.add("nested", make_array(ValueType::ARRAY, {make_array(ValueType::UINT32, {make_u32(1), make_u32(2)}),
                                                make_array(ValueType::UINT32, {})}));
  auto f32 = pattern(3 * 5 * 4, 1);
  auto f16 = pattern(7 * 2, 2);
  auto q8 = pattern(2 * 34 * 3, 3);  // Q8_0: 34 bytes per 32 values
  w.add_tensor("a", DType::F32, {3, 5}, f32.data(), f32.size());
  w.add_tensor("b", DType::F16, {7}, f16.data(), f16.size());
  w.add_tensor("c", DType::Q8_0, {64, 3, 1}, q8.data(), q8.size());

  std::vector<uint8_t> bytes = w.to_bytes();
  auto f = File::parse(bytes.data(), bytes.size(), "written.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_FALSE(f->has("general.alignment"));  // the default is not spelled out
  ASSERT_EQ(f->metadata().size(), 14u);
  EXPECT_EQ(f->metadata()[0].first, "u8");  // file order kept
  EXPECT_EQ(f->get_int("u8"), 200);
  EXPECT_EQ(f->get_int("i8"), -100);
  EXPECT_EQ(f->get_int("u16"), 60000);
  EXPECT_EQ(f->get_int("i16"), -30000);
  EXPECT_EQ(f->get_int("u32"), 4000000000);
  EXPECT_EQ(f->get_int("i32"), -2000000000);
  EXPECT_EQ(f->get_int("u64"), 1ll << 60);
  EXPECT_EQ(f->get_int("i64"), -(1ll << 60));
  EXPECT_EQ(f->get_float("f32"), 0.5);
  EXPECT_EQ(f->get_float("f64"), 1.0 / 3.0);
  EXPECT_TRUE(f->get_bool("bool", false));
  EXPECT_EQ(f->get_string("str"), "héllo\nworld");
  EXPECT_EQ(f->get_strings("strs"), (std::vector<std::string>{"a", "", "ccc"}));
  const Array& nested = f->get_array("nested");
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].as_array("n").items.at(1).as_int("n"), 2);
  EXPECT_TRUE(nested.items[1].as_array("n").items.empty());
  EXPECT_EQ(f->find("u8")->type, ValueType::UINT8);
  EXPECT_EQ(f->find("f32")->type, ValueType::FLOAT32);

  ASSERT_EQ(f->tensors().size(), 3u);
  const TensorInfo& c = f->tensor("c");
  EXPECT_EQ(c.type, DType::Q8_0);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{64, 3, 1}));
  EXPECT_EQ(std::memcmp(c.data, q8.data(), q8.size()), 0);
  EXPECT_EQ(std::memcmp(f->tensor("a").data, f32.data(), f32.size()), 0);
  EXPECT_EQ(std::memcmp(f->tensor("b").data, f16.data(), f16.size()), 0);
  for (const TensorInfo& t : f->tensors()) EXPECT_EQ((t.data - bytes.data()) % 32, 0) << t.name;
}

TEST(GgufWriter, CopiesARealModel) {
  auto src = File::open(kModels + "/stories260K.gguf");
  Writer w;
  for (const auto& [key, value] : src->metadata()) w.add(key, value);
  for (const TensorInfo& t : src->tensors()) w.add_tensor(t.name, t.type, t.shape, t.data, t.bytes);
  TempDir dir;
  std::string path = dir.path + "/copy.gguf";
  w.write(path);
  std::vector<uint8_t> in_memory = w.to_bytes();
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> on_disk{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_EQ(on_disk, in_memory);  // write() and to_bytes() agree

  auto copy = File::open(path);
  ASSERT_EQ(copy->metadata().size(), src->metadata().size());
  for (size_t i = 0; i < src->metadata().size(); ++i) {
    EXPECT_EQ(copy->metadata()[i].first, src->metadata()[i].first);
    EXPECT_EQ(copy->metadata()[i].second.type, src->metadata()[i].second.type);
    EXPECT_EQ(copy->metadata()[i].second.to_display(1000000), src->metadata()[i].second.to_display(1000000));
  }
  ASSERT_EQ(copy->tensors().size(), src->tensors().size());
  for (const TensorInfo& t : src->tensors()) {
    const TensorInfo& u = copy->tensor(t.name);
    EXPECT_EQ(u.type, t.type);
    EXPECT_EQ(u.shape, t.shape);
    ASSERT_EQ(u.bytes, t.bytes);
    EXPECT_EQ(std::memcmp(u.data, t.data, t.bytes), 0) << t.name;
  }
}

TEST(GgufWriter, RecordsNonDefaultAlignment) {
  Writer w(64);
  auto a = pattern(4 * 3, 1), b = pattern(4 * 9, 2);
  w.add_tensor("a", DType::F32, {3}, a.data(), a.size());
  w.add_tensor("b", DType::F32, {9}, b.data(), b.size());
  std::vector<uint8_t> bytes = w.to_bytes();
  auto f = File::parse(bytes.data(), bytes.size(), "aligned.gguf");
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->tensor("b").offset, 64u);
  for (const TensorInfo& t : f->tensors()) EXPECT_EQ((t.data - bytes.data()) % 64, 0) << t.name;
  EXPECT_THROW(Writer(48), Error);
}

TEST(GgufWriter, RefusesBadInput) {
  Writer w;
  auto data = pattern(64, 0);
  w.add("k", make_u32(1));
  EXPECT_THROW(w.add("k", make_u32(2)), Error);                                 // duplicate key
  EXPECT_THROW(w.add("big", Value{ValueType::UINT8, uint64_t{300}}), Error);    // out of range
  EXPECT_THROW(w.add("neg", Value{ValueType::UINT32, int64_t{-1}}), Error);     // out of range
  EXPECT_THROW(w.add("s", Value{ValueType::STRING, uint64_t{1}}), Error);       // payload not a string
  EXPECT_THROW(w.add("arr", make_array(ValueType::UINT32, {make_string("x")})), Error);  // mixed array
  EXPECT_THROW(w.add("general.alignment", make_u32(64)), Error);  // disagrees with the writer
  w.add_tensor("t", DType::F32, {16}, data.data(), 64);
  EXPECT_THROW(w.add_tensor("t", DType::F32, {16}, data.data(), 64), Error);       // duplicate name
  EXPECT_THROW(w.add_tensor("u", DType::F32, {15}, data.data(), 64), Error);       // wrong size
  EXPECT_THROW(w.add_tensor("u", DType::F32, {}, data.data(), 0), Error);          // no dims
  EXPECT_THROW(w.add_tensor("u", DType::F32, {1, 1, 1, 1, 16}, data.data(), 64), Error);  // 5 dims
  EXPECT_THROW(w.add_tensor("u", DType::Q8_0, {16}, data.data(), 17), Error);      // half a block
  // Nothing refused was added: the file still reads back with one of each.
  std::vector<uint8_t> bytes = w.to_bytes();
  auto f = File::parse(bytes.data(), bytes.size(), "w.gguf");
  EXPECT_EQ(f->metadata().size(), 1u);
  EXPECT_EQ(f->tensors().size(), 1u);

  TempDir dir;
  std::string path = dir.path + "/missing/x.gguf";
  try {
    w.write(path);
    FAIL() << "expected shoal::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shoal::gguf
