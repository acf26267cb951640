// docs/design.md: the same bits for any thread count and any batch composition.
// Logits are compared with exact equality (memcmp), never a tolerance.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/generator.h"
#include "model_test_support.h"

namespace shoal::testing {
namespace {

std::vector<std::string> models() {
  std::vector<std::string> m = {test_data_dir() + "/models/stories260K.gguf"};
  std::string smol = models_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (file_exists(smol)) m.push_back(smol);
  for (const std::string& path : random_model_paths()) m.push_back(path);  // every architecture's blocks
  return m;
}

TEST(Determinism, ThreadsAndChunkingGiveIdenticalLogits) {
  for (const auto& path : models()) {
    SCOPED_TRACE(path);
    auto e1 = load_engine(path, 1, 64);
    auto e2 = load_engine(path, 2, 64);
    // A prompt longer than one batch of 64.
    std::vector<TokenId> tokens = e1->tokenizer().encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog, "
        "a big brown dog called Max. One day, Lily and Max went to the park near the river. They saw a red ball "
        "under a tree and ran to get it, laughing all the way home before the rain came down on the quiet town.",
        true, false);
    ASSERT_GT(tokens.size(), 64u);
    const auto one_batch_t1 = all_logits(*e1, tokens, 64);
    EXPECT_TRUE(same_bits(one_batch_t1, all_logits(*e2, tokens, 64))) << "-t 1 vs -t 2";
    EXPECT_TRUE(same_bits(one_batch_t1, all_logits(*e2, tokens, 1))) << "batched vs token by token";
    EXPECT_TRUE(same_bits(one_batch_t1, all_logits(*e2, tokens, 7))) << "batched vs chunks of 7";
    // A batch limit of 1: gemma3's windowed layers then keep a ring of 9
    // positions instead of 72 (window 8 + the batch).
    auto e3 = load_engine(path, 2, 1);
    EXPECT_TRUE(same_bits(one_batch_t1, all_logits(*e3, tokens, 1))) << "batch limit 64 vs 1";
  }
}

// The last layer finishes only the rows that want logits (LocalStage): a
// row's logits are the same bits whichever other rows want theirs, and a
// chunk that wants none still leaves every row's K and V for the next.
TEST(Determinism, RowsWithoutLogitsChangeNoOtherRow) {
  for (const auto& path : models()) {
    SCOPED_TRACE(path);
    auto e = load_engine(path, 2, 64);
    const int n_vocab = e->config().n_vocab;
    const std::vector<TokenId> tokens = e->tokenizer().encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.", true, false);
    ASSERT_GT(tokens.size(), 12u);
    const auto every = all_logits(*e, tokens, 64);
    auto row = [&](const std::vector<float>& l, size_t t) {
      return std::vector<float>(l.begin() + t * n_vocab, l.begin() + (t + 1) * n_vocab);
    };
    // Two rows of one batch want logits (a middle one and the last).
    const size_t mid = tokens.size() / 2, last = tokens.size() - 1;
    e->pipeline().truncate_sequence(0, 0);
    Batch b;
    for (size_t t = 0; t < tokens.size(); ++t) b.add(tokens[t], static_cast<int>(t), 0, t == mid || t == last);
    const float* l = e->pipeline().forward(b);
    EXPECT_TRUE(same_bits(row(every, mid), std::vector<float>(l, l + n_vocab))) << "middle row";
    EXPECT_TRUE(same_bits(row(every, last), std::vector<float>(l + n_vocab, l + 2 * n_vocab))) << "last row";
    // The first chunk wants no logits; the second's last row must not notice.
    e->pipeline().truncate_sequence(0, 0);
    b.clear();
    for (size_t t = 0; t < mid; ++t) b.add(tokens[t], static_cast<int>(t), 0, false);
    e->pipeline().forward(b);
    b.clear();
    for (size_t t = mid; t < tokens.size(); ++t) b.add(tokens[t], static_cast<int>(t), 0, t == last);
    l = e->pipeline().forward(b);
    EXPECT_TRUE(same_bits(row(every, last), std::vector<float>(l, l + n_vocab))) << "after a chunk with no logits";
  }
}

// A windowed layer overwrites what falls out of its window, so a cached
// prefix is reused only when the sequence is cut back by at most one batch;
// either way the logits are those of a fresh run.
TEST(Determinism, SlidingWindowPrefixReuseMatchesAFreshRun) {
  const std::string path = random_model_path("random-gemma3");
  SHOAL_NEED_FILE(path);
  auto engine = load_engine(path, 2, 4);
  ASSERT_EQ(engine->pipeline().max_rollback(), 4);  // ring 8 + 4, window 8
  std::vector<TokenId> history = engine->tokenizer().encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside.", true, false);
  ASSERT_GT(history.size(), 20u);
  GenerationOptions opt;
  opt.max_tokens = 1;
  opt.sampling.temperature = 0.0f;
  opt.ignore_eos = true;
  auto last_logits = [&](Generator& g, const std::vector<TokenId>& prompt, int* reused) {
    std::vector<float> logits;
    GenerationOptions o = opt;
    o.on_logits = [&](const float* l, int n) { logits.assign(l, l + n); };
    *reused = g.generate(prompt, o, nullptr).n_reused;
    return logits;
  };
  for (size_t cut : {size_t{2}, size_t{5}, size_t{6}, size_t{12}}) {
    SCOPED_TRACE(cut);
    Generator warm(engine->pipeline(), engine->tokenizer(), engine->n_ctx());
    int reused = 0;
    last_logits(warm, history, &reused);  // the cache now holds `history` (the one new token is not fed)
    std::vector<TokenId> next(history.begin(), history.end() - static_cast<std::ptrdiff_t>(cut) + 1);
    next.push_back(7);  // a different token after the shared prefix
    const auto got = last_logits(warm, next, &reused);
    // The shared prefix is history minus cut - 1 tokens: reusable up to a cut back of 4.
    EXPECT_EQ(reused, cut - 1 <= 4 ? static_cast<int>(next.size()) - 1 : 0);
    auto fresh_engine = load_engine(path, 2, 4);
    Generator fresh(fresh_engine->pipeline(), fresh_engine->tokenizer(), fresh_engine->n_ctx());
    EXPECT_TRUE(same_bits(got, last_logits(fresh, next, &reused)));
  }
}

// Sequences interleaved row by row in one batch (each row on its own
// sequence's KV cache, or recurrent state for qwen35's DeltaNet layers) give
// the bits each gives alone; a slot used again starts from zero state.
// (gpt-oss: attention sinks, a window every other layer, MXFP4 experts;
// deepseek2: latent attention; qwen3next: its joint beta/alpha and keys in
// runs; minimax-m2: norms across every head of a row; gemma4moe: layers of
// two geometries, V from K, experts beside a dense FFN; gemma4e: per-layer
// inputs, layers reading an earlier layer's cache.)
TEST(Determinism, SequencesInOneBatchMatchSequencesAlone) {
  std::vector<std::string> paths = {test_data_dir() + "/models/stories260K.gguf"};
  // A recurrent state; sinks, windows, MXFP4; latent attention's K-only cache and grouped routing.
  for (const char* name : {"random-qwen35", "random-gpt-oss-mxfp4", "random-deepseek2", "random-qwen3next",
                           "random-minimax-m2", "random-gemma4moe", "random-gemma4e"})
    if (const std::string path = random_model_path(name); file_exists(path)) paths.push_back(path);
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    auto alone = load_engine(path, 2, 64, 1);
    auto together = load_engine(path, 2, 64, 3);
    const Tokenizer& tok = alone->tokenizer();
    std::vector<std::vector<TokenId>> prompts = {tok.encode("Once upon a time", true, false),
                                                 tok.encode("The little dog ran", true, false),
                                                 tok.encode("Lily and Tom were friends who", true, false)};
    const int n_vocab = alone->config().n_vocab;
    for (int round = 0; round < 2; ++round) {  // the second round reuses the slots
      for (int s = 0; s < 3; ++s) together->pipeline().truncate_sequence(s, 0);
      // Interleave the three prompts token by token in one batch per step.
      size_t longest = 0;
      for (auto& p : prompts) longest = std::max(longest, p.size());
      std::vector<std::vector<float>> mixed(prompts.size());
      for (size_t pos = 0; pos < longest; ++pos) {
        Batch b;
        std::vector<int> owners;
        for (size_t s = 0; s < prompts.size(); ++s)
          if (pos < prompts[s].size()) {
            b.add(prompts[s][pos], static_cast<int>(pos), static_cast<int>(s), true);
            owners.push_back(static_cast<int>(s));
          }
        const float* l = together->pipeline().forward(b);
        for (size_t r = 0; r < owners.size(); ++r)
          mixed[owners[r]].insert(mixed[owners[r]].end(), l + r * n_vocab, l + (r + 1) * n_vocab);
      }
      for (size_t s = 0; s < prompts.size(); ++s) {
        alone->pipeline().truncate_sequence(0, 0);
        EXPECT_TRUE(same_bits(all_logits(*alone, prompts[s], 64), mixed[s])) << "sequence " << s << ", round " << round;
      }
      std::rotate(prompts.begin(), prompts.begin() + 1, prompts.end());
    }
  }
}

}  // namespace
}  // namespace shoal::testing
