// The worker's on-disk weight cache, on real tensor bytes in a temp dir.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "cluster/worker/weight_cache.h"
#include "gguf/reader.h"
#include "temp_dir.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace shoal {
namespace {
namespace fs = std::filesystem;

struct TempDir : shoal::testing::TempDir {
  TempDir() : shoal::testing::TempDir("shoal-cache") {}
};

// Real tensor bytes and their hashes, from the test model.
struct Tensor {
  ContentHash hash;
  const uint8_t* data;
  size_t size;
};

class WeightCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = gguf::File::open(std::string(SHOAL_TEST_DATA_DIR) + "/models/stories260K.gguf"); }

  Tensor tensor(const std::string& name) const {
    const gguf::TensorInfo& t = model_->tensor(name);
    return Tensor{hash_bytes(t.data, t.bytes), t.data, t.bytes};
  }
  // Layer tensors of one kind all have the same size, which makes eviction
  // arithmetic exact.
  Tensor layer(int i) const { return tensor("blk." + std::to_string(i) + ".attn_q.weight"); }

  bool holds(WeightCache& cache, const Tensor& t) {
    TensorBytes b = cache.find(t.hash, t.size);
    return b.data && b.size == t.size && std::memcmp(b.data, t.data, t.size) == 0;
  }
  std::string entry_path(const std::string& dir, const Tensor& t) const { return dir + "/" + t.hash.hex() + ".bin"; }

  std::unique_ptr<gguf::File> model_;
  TempDir dir_;
};

TEST_F(WeightCacheTest, PutFindRoundTrip) {
  Tensor emb = tensor("token_embd.weight");
  TensorBytes kept;
  {
    WeightCache cache(dir_.path + "/sub/cache", 1 << 20);  // creates missing parents
    EXPECT_EQ(cache.entries(), 0u);
    EXPECT_EQ(cache.find(emb.hash, emb.size).data, nullptr);
    cache.put(emb.hash, emb.data, emb.size);
    EXPECT_EQ(cache.entries(), 1u);
    EXPECT_EQ(cache.bytes(), emb.size);
    EXPECT_TRUE(fs::exists(entry_path(cache.dir(), emb)));
    kept = cache.find(emb.hash, emb.size);
    ASSERT_NE(kept.data, nullptr);
    // Putting the same bytes again changes nothing.
    cache.put(emb.hash, emb.data, emb.size);
    EXPECT_EQ(cache.entries(), 1u);
    EXPECT_EQ(cache.bytes(), emb.size);
  }
  // The bytes outlive the cache object: the keepalive holds the mapping.
  ASSERT_EQ(kept.size, emb.size);
  EXPECT_EQ(std::memcmp(kept.data, emb.data, emb.size), 0);
  EXPECT_EQ(hash_bytes(kept.data, kept.size), emb.hash);
  // No temp files are left behind.
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir_.path + "/sub/cache")) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST_F(WeightCacheTest, SizeMismatchIsAMissAndRemovesTheEntry) {
  Tensor a = layer(0), b = layer(1);
  WeightCache cache(dir_.path, 1 << 20);
  cache.put(a.hash, a.data, a.size);
  EXPECT_EQ(cache.find(a.hash, a.size + 1).data, nullptr);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_FALSE(fs::exists(entry_path(dir_.path, a)));

  // A file truncated behind the cache's back (e.g. after a power loss).
  cache.put(b.hash, b.data, b.size);
  fs::resize_file(entry_path(dir_.path, b), b.size / 2);
  EXPECT_EQ(cache.find(b.hash, b.size).data, nullptr);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_FALSE(fs::exists(entry_path(dir_.path, b)));

  // remove() drops an entry that failed the caller's hash check.
  cache.put(a.hash, a.data, a.size);
  cache.remove(a.hash);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_FALSE(fs::exists(entry_path(dir_.path, a)));
}

TEST_F(WeightCacheTest, EvictsLeastRecentlyUsed) {
  Tensor a = layer(0), b = layer(1), c = layer(2);
  WeightCache cache(dir_.path, 2 * a.size);
  cache.put(a.hash, a.data, a.size);
  cache.put(b.hash, b.data, b.size);
  ASSERT_TRUE(holds(cache, a));  // a is now more recent than b
  TensorBytes b_mapped = cache.find(b.hash, b.size);
  ASSERT_TRUE(holds(cache, a));
  cache.put(c.hash, c.data, c.size);
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * a.size);
  EXPECT_FALSE(fs::exists(entry_path(dir_.path, b)));
  EXPECT_TRUE(holds(cache, a));
  EXPECT_TRUE(holds(cache, c));
  EXPECT_FALSE(holds(cache, b));
  // An evicted entry that was mapped stays readable for its holder.
  EXPECT_EQ(std::memcmp(b_mapped.data, b.data, b.size), 0);
}

TEST_F(WeightCacheTest, RestartKeepsEntriesAndLruOrder) {
  Tensor a = layer(0), b = layer(1), c = layer(2), d = layer(3);
  {
    WeightCache cache(dir_.path, 3 * a.size);
    cache.put(a.hash, a.data, a.size);
    cache.put(b.hash, b.data, b.size);
    cache.put(c.hash, c.data, c.size);
    ASSERT_TRUE(holds(cache, a));  // order, oldest first: b, c, a
  }
  // Files that are not entries are neither counted nor touched.
  std::ofstream(dir_.path + "/notes.txt") << "hello";
  std::ofstream(dir_.path + "/" + std::string(64, 'A') + ".bin") << "upper case is not ours";
  fs::create_directory(dir_.path + "/" + std::string(64, '0') + ".bin");
  {
    WeightCache cache(dir_.path, 3 * a.size);
    EXPECT_EQ(cache.entries(), 3u);
    EXPECT_EQ(cache.bytes(), 3 * a.size);
    cache.put(d.hash, d.data, d.size);  // evicts b, the oldest
    EXPECT_FALSE(fs::exists(entry_path(dir_.path, b)));
    EXPECT_TRUE(fs::exists(entry_path(dir_.path, c)));
    EXPECT_TRUE(fs::exists(entry_path(dir_.path, a)));
    EXPECT_TRUE(fs::exists(entry_path(dir_.path, d)));  // order now: c, a, d
  }
  {
    // A smaller --cache-max evicts the oldest at start-up.
    WeightCache cache(dir_.path, 2 * a.size);
    EXPECT_EQ(cache.entries(), 2u);
    EXPECT_FALSE(fs::exists(entry_path(dir_.path, c)));
    EXPECT_TRUE(holds(cache, a));
    EXPECT_TRUE(holds(cache, d));
  }
  EXPECT_TRUE(fs::exists(dir_.path + "/notes.txt"));
  EXPECT_TRUE(fs::exists(dir_.path + "/" + std::string(64, 'A') + ".bin"));
}

TEST_F(WeightCacheTest, EntriesOfTheXxh3EraAreDeletedUnread) {
  // Before protocol v7 entries were named by XXH3-128 (32 hex digits), a
  // name anyone could make collide. Such a file, whatever it holds, is
  // neither indexed nor found: it is deleted when the cache opens.
  Tensor a = layer(0);
  const std::string legacy = dir_.path + "/" + a.hash.hex().substr(0, 32) + ".bin";
  std::ofstream(legacy, std::ios::binary).write(reinterpret_cast<const char*>(a.data), a.size);
  WeightCache cache(dir_.path, 1 << 20);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_EQ(cache.find(a.hash, a.size).data, nullptr);
  // The name is the SHA-256 of the bytes, 64 digits.
  EXPECT_EQ(a.hash.hex().size(), 64u);
  cache.put(a.hash, a.data, a.size);
  EXPECT_TRUE(fs::exists(entry_path(dir_.path, a)));
}

TEST_F(WeightCacheTest, EntryLargerThanMaxIsNotStored) {
  Tensor a = layer(0), emb = tensor("token_embd.weight");
  WeightCache cache(dir_.path, a.size);
  cache.put(a.hash, a.data, a.size);
  cache.put(emb.hash, emb.data, emb.size);  // would not fit even alone: a stays
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_TRUE(holds(cache, a));
  EXPECT_FALSE(fs::exists(entry_path(dir_.path, emb)));
}

TEST_F(WeightCacheTest, ZeroMaxStoresNothing) {
  Tensor a = layer(0);
  std::string dir = dir_.path + "/never";
  WeightCache cache(dir, 0);
  cache.put(a.hash, a.data, a.size);
  EXPECT_EQ(cache.find(a.hash, a.size).data, nullptr);
  EXPECT_EQ(cache.entries(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(WeightCacheTest, UncreatableDirThrowsWithPath) {
  std::ofstream(dir_.path + "/file") << "x";
  std::string dir = dir_.path + "/file/cache";
  try {
    WeightCache cache(dir, 1 << 20);
    FAIL() << "expected shoal::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
  }
}

TEST_F(WeightCacheTest, ConcurrentPutFindDoesNotCorrupt) {
  std::vector<Tensor> tensors;
  for (int i = 0; i < 5; ++i) tensors.push_back(layer(i));
  // Room for three of five: puts keep evicting while the other thread finds.
  WeightCache cache(dir_.path, 3 * tensors[0].size);
  std::atomic<int> bad{0};
  auto work = [&](int seed) {
    for (int round = 0; round < 200; ++round) {
      const Tensor& t = tensors[(round * 7 + seed) % tensors.size()];
      TensorBytes got = cache.find(t.hash, t.size);
      if (!got.data) cache.put(t.hash, t.data, t.size);
      else if (got.size != t.size || std::memcmp(got.data, t.data, t.size) != 0) ++bad;
      (void)cache.bytes();  // stats from another thread while loading
    }
  };
  std::thread t1(work, 0), t2(work, 3);
  t1.join();
  t2.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(cache.bytes(), cache.max_bytes());
  // The index agrees with the disk, and every file holds what its name says.
  uint64_t on_disk = 0;
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir_.path)) {
    MappedFile m(e.path().string());
    EXPECT_EQ(hash_bytes(m.data(), m.size()).hex() + ".bin", e.path().filename().string());
    on_disk += m.size();
    ++files;
  }
  EXPECT_EQ(on_disk, cache.bytes());
  EXPECT_EQ(files, cache.entries());
}

}  // namespace
}  // namespace shoal
