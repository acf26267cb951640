// A sequence's cache moves between stages (Stage::read_cache and
// write_cache): a prompt forwarded on one engine, its cache written into
// another's stage, and the tokens decoded there have the bits of decoding
// where the prompt ran, for each kind of sequence memory: a plain KV cache
// (llama3), windows (gemma3: 8 positions, the prompt longer, the two rings
// of different sizes), a recurrent state (qwen35) and latent attention
// (deepseek2's cached latents).
#include <gtest/gtest.h>

#include "model_test_support.h"

namespace shoal {
namespace {

using testing::load_engine;
using testing::file_exists;
using testing::random_model_path;

std::vector<float> step(Engine& e, int token, int pos) {
  Batch b;
  b.add(token, pos, 0, true);
  const float* l = e.pipeline().forward(b);
  return {l, l + e.config().n_vocab};
}

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

class SequenceCacheTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SequenceCacheTest, DecodingWhereTheCacheWasMovedGivesTheSameBits) {
  const std::string path = random_model_path(GetParam());
  if (!file_exists(path)) GTEST_SKIP() << "no " << path << " (scripts/test makes it)";
  auto prompted = load_engine(path, 1, 64);
  auto moved = load_engine(path, 2, 16);  // other threads and batch: a smaller ring for windowed layers
  const int n_prompt = 40;  // past gemma3's window, and past the smaller ring
  Batch prompt;
  for (int i = 0; i < n_prompt; ++i) prompt.add(3 + (i * 7) % 50, i, 0, i + 1 == n_prompt);
  const float* l = prompted->pipeline().forward(prompt);
  int token = argmax({l, l + prompted->config().n_vocab});

  Stage& from = *prompted->pipeline().stages().at(0);
  Stage& to = *moved->pipeline().stages().at(0);
  const int n_layer = prompted->config().n_layer;
  size_t bytes = 0;
  for (int layer = 0; layer < n_layer; ++layer) {
    const LayerCache cache = from.read_cache(0, layer);
    EXPECT_EQ(cache.length, n_prompt);
    bytes += cache.bytes.size();
    to.write_cache(0, layer, cache);
  }
  EXPECT_GT(bytes, 0u);
  for (int i = 0; i < 6; ++i) {
    const std::vector<float> a = step(*prompted, token, n_prompt + i), b = step(*moved, token, n_prompt + i);
    ASSERT_TRUE(testing::same_bits(a, b)) << GetParam() << ": token " << i << " after the move";
    token = argmax(a);
  }
  // And on again, from the smaller ring (a windowed layer hands over only
  // the positions it still holds) into a larger one.
  auto third = load_engine(path, 1, 64);
  for (int layer = 0; layer < n_layer; ++layer) {
    const LayerCache again = to.read_cache(0, layer);
    EXPECT_EQ(again.length, n_prompt + 6);
    third->pipeline().stages().at(0)->write_cache(0, layer, again);
  }
  for (int i = 6; i < 10; ++i) {
    const std::vector<float> a = step(*prompted, token, n_prompt + i), c = step(*third, token, n_prompt + i);
    ASSERT_TRUE(testing::same_bits(a, c)) << GetParam() << ": token " << i << " after the second move";
    token = argmax(a);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, SequenceCacheTest,
                         ::testing::Values("random-llama3", "random-gemma3", "random-qwen35", "random-deepseek2"));

TEST(SequenceCache, ACacheOfAnotherModelOrShapeIsRefusedByName) {
  const std::string llama = random_model_path("random-llama3"), gemma = random_model_path("random-gemma3");
  if (!file_exists(llama) || !file_exists(gemma)) GTEST_SKIP() << "no random models (scripts/test makes them)";
  auto a = load_engine(llama, 1, 16), b = load_engine(gemma, 1, 16);
  Batch prompt;
  for (int i = 0; i < 5; ++i) prompt.add(3 + i, i, 0, i == 4);
  a->pipeline().forward(prompt);
  LayerCache cache = a->pipeline().stages().at(0)->read_cache(0, 1);
  try {
    b->pipeline().stages().at(0)->write_cache(0, 1, cache);
    FAIL() << "a llama cache went into a gemma3 stage";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1: a cache of"), std::string::npos) << e.what();
  }
  // Same model, a layer's bytes cut short, or a layer the stage lacks: named.
  auto c = load_engine(llama, 1, 16);
  cache.bytes.pop_back();
  try {
    c->pipeline().stages().at(0)->write_cache(0, 1, cache);
    FAIL() << "a short layer was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1: a cache of"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c->pipeline().stages().at(0)->read_cache(0, 99), Error);
}

}  // namespace
}  // namespace shoal
