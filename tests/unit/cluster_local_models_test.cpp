// The worker's --models-dir: tensors found by type, shape and content hash in
// the GGUF files it already has, whatever they are called there.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cluster/worker/local_models.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "temp_dir.h"
#include "util/error.h"

namespace shoal {
namespace {
namespace fs = std::filesystem;

const std::string kModels = std::string(SHOAL_TEST_DATA_DIR) + "/models";

struct TempDir : shoal::testing::TempDir {
  TempDir() : shoal::testing::TempDir("shoal-models") {}
};

class LocalModelsTest : public ::testing::Test {
 protected:
  void SetUp() override { stories_ = gguf::File::open(kModels + "/stories260K.gguf"); }

  // Every tensor of stories260K is found with its exact bytes.
  void expect_finds_all(LocalModels& models) {
    for (const gguf::TensorInfo& t : stories_->tensors()) {
      TensorBytes b = models.find(t.type, t.shape, hash_bytes(t.data, t.bytes));
      ASSERT_NE(b.data, nullptr) << t.name;
      ASSERT_EQ(b.size, t.bytes) << t.name;
      EXPECT_EQ(std::memcmp(b.data, t.data, t.bytes), 0) << t.name;
    }
  }

  std::unique_ptr<gguf::File> stories_;
  TempDir dir_;
};

TEST_F(LocalModelsTest, SkipsBrokenFilesAndFindsByContent) {
  fs::create_symlink(kModels + "/stories260K.gguf", dir_.path + "/stories.gguf");
  fs::copy_file(kModels + "/llama-2-tiny-random.gguf", dir_.path + "/tiny.gguf");
  {
    std::ifstream in(kModels + "/stories260K.gguf", std::ios::binary);
    char head[100];
    in.read(head, sizeof(head));
    std::ofstream(dir_.path + "/broken.gguf", std::ios::binary).write(head, sizeof(head));
  }
  std::ofstream(dir_.path + "/readme.txt") << "not a model";

  TensorBytes kept;
  const gguf::TensorInfo& q3 = stories_->tensor("blk.3.attn_q.weight");
  {
    LocalModels models(dir_.path);
    std::vector<std::string> files = models.files();
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(fs::path(files[0]).filename(), "stories.gguf");
    EXPECT_EQ(fs::path(files[1]).filename(), "tiny.gguf");
    expect_finds_all(models);
    // Five layers share this type and shape; the hash picks layer 3.
    kept = models.find(q3.type, q3.shape, hash_bytes(q3.data, q3.bytes));
  }
  // The bytes outlive the LocalModels object: the keepalive holds the file.
  ASSERT_EQ(kept.size, q3.bytes);
  EXPECT_EQ(std::memcmp(kept.data, q3.data, q3.bytes), 0);
}

TEST_F(LocalModelsTest, WrongHashOrShapeIsAMiss) {
  fs::create_symlink(kModels + "/stories260K.gguf", dir_.path + "/stories.gguf");
  LocalModels models(dir_.path);
  const gguf::TensorInfo& t = stories_->tensor("blk.0.ffn_down.weight");
  ContentHash h = hash_bytes(t.data, t.bytes);
  ContentHash wrong = h;
  wrong.bytes[0] ^= 1;
  EXPECT_EQ(models.find(t.type, t.shape, wrong).data, nullptr);
  std::vector<int64_t> other_shape = {t.shape[1], t.shape[0]};
  EXPECT_EQ(models.find(t.type, other_shape, h).data, nullptr);
  EXPECT_EQ(models.find(DType::F16, t.shape, h).data, nullptr);
  // Misses do not spoil later hits (hashes computed on the way are kept).
  EXPECT_NE(models.find(t.type, t.shape, h).data, nullptr);
  EXPECT_EQ(models.find(t.type, t.shape, wrong).data, nullptr);
}

TEST_F(LocalModelsTest, MatchesRenamedTensors) {
  // The same tensors under other names, in reverse order, in a file written
  // by our GGUF writer.
  gguf::Writer w;
  w.add("general.architecture", gguf::make_string("llama"));
  const auto& tensors = stories_->tensors();
  for (size_t i = tensors.size(); i-- > 0;) {
    const gguf::TensorInfo& t = tensors[i];
    w.add_tensor("renamed." + std::to_string(i), t.type, t.shape, t.data, t.bytes);
  }
  w.write(dir_.path + "/renamed.gguf");

  LocalModels models(dir_.path);
  ASSERT_EQ(models.files().size(), 1u);
  expect_finds_all(models);
}

TEST_F(LocalModelsTest, ConcurrentFinds) {
  fs::create_symlink(kModels + "/stories260K.gguf", dir_.path + "/stories.gguf");
  fs::create_symlink(kModels + "/llama-2-tiny-random.gguf", dir_.path + "/tiny.gguf");
  LocalModels models(dir_.path);
  auto tiny = gguf::File::open(kModels + "/llama-2-tiny-random.gguf");
  std::atomic<int> bad{0};
  auto work = [&](const gguf::File& f, bool reverse) {
    std::vector<const gguf::TensorInfo*> list;
    for (const auto& t : f.tensors()) list.push_back(&t);
    if (reverse) std::reverse(list.begin(), list.end());
    for (const gguf::TensorInfo* t : list) {
      TensorBytes b = models.find(t->type, t->shape, hash_bytes(t->data, t->bytes));
      if (!b.data || b.size != t->bytes || std::memcmp(b.data, t->data, t->bytes) != 0) ++bad;
    }
  };
  std::thread t1(work, std::cref(*stories_), false), t2(work, std::cref(*stories_), true),
      t3(work, std::cref(*tiny), false);
  t1.join();
  t2.join();
  t3.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(LocalModelsTest, MissingDirThrows) {
  EXPECT_THROW(LocalModels(dir_.path + "/nope"), Error);
  LocalModels empty(dir_.path);
  EXPECT_TRUE(empty.files().empty());
  EXPECT_EQ(empty.find(DType::F32, {64}, ContentHash{}).data, nullptr);
}

}  // namespace
}  // namespace shoal
