// Qwen3.5's hybrid layers (Gated DeltaNet beside gated attention) on the
// random-weight model tests/models/make_random_models.py writes: the layer
// kinds and sizes as llama.cpp reads them, a recurrent state in place of a
// KV cache for DeltaNet layers, and a sequence that can start again or go on
// but never go back (a state holds every position so far).
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "gguf/reader.h"
#include "model/kv_cache.h"
#include "model/recurrent_state.h"
#include "model_test_support.h"

namespace shoal::testing {
namespace {

TEST(HybridModel, LayerKindsAndSizesAreReadAsLlamaCppReadsThem) {
  const std::string path = random_model_path("random-qwen35");
  SHOAL_NEED_FILE(path);
  const ModelConfig c = ModelConfig::from_gguf(*gguf::File::open(path));
  // full_attention_interval 2: layers 1 and 3 attend, 0 and 2 recur.
  ASSERT_EQ(c.n_layer, 4);
  EXPECT_TRUE(c.recurrent(0) && !c.recurrent(1) && c.recurrent(2) && !c.recurrent(3));
  EXPECT_EQ(c.delta.conv_kernel, 4);
  EXPECT_EQ(c.delta.conv_width(), 2 * 32 * 2 + 32 * 4);
  EXPECT_TRUE(c.q_gate);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.tensor_name(TensorKind::FfnNorm, 2), "blk.2.post_attention_norm.weight");
  // Memory per sequence: KV rows only for the two attention layers; the
  // DeltaNet layers' state does not grow with the context.
  const int n_ctx = 512, n_seq = 3;
  const size_t kv_row = 2 * static_cast<size_t>(c.kv_width()) * sizeof(float);
  EXPECT_EQ(KvCache::bytes_for(c, 0, 4, n_seq, n_ctx, 64, {DType::F32, DType::F32}), 2 * n_seq * n_ctx * kv_row);
  const size_t state = (3 * 256 + 4 * 32 * 32) * sizeof(float);  // conv: 3 inputs of 256; 4 heads of 32 x 32
  EXPECT_EQ(RecurrentState::bytes_for(c, 0, 4, n_seq), 2 * n_seq * state);
  EXPECT_EQ(RecurrentState::bytes_for(c, 1, 2, n_seq), 0u);
  EXPECT_EQ(KvCache::max_rollback(c, n_ctx, 64), 0);
}

TEST(HybridModel, ASequenceStartsAgainOrGoesOnButNeverGoesBack) {
  const std::string path = random_model_path("random-qwen35");
  SHOAL_NEED_FILE(path);
  auto engine = load_engine(path, 2, 64);
  const std::vector<TokenId> tokens = engine->tokenizer().encode("Once upon a time, there was a girl", true, false);
  const auto fresh = all_logits(*engine, tokens, 64);
  Pipeline& p = engine->pipeline();
  // Going back into what the state holds is refused, naming the reason.
  Batch back;
  back.add(tokens[3], 3, 0, true);
  try {
    p.forward(back);
    FAIL() << "rewrote position 3 of a recurrent state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recurrent state"), std::string::npos) << e.what();
  }
  // So is a cut to anything but the start or the whole.
  EXPECT_THROW(p.truncate_sequence(0, 4), Error);
  // Starting again from position 0 gives a fresh run's bits.
  p.truncate_sequence(0, 0);
  EXPECT_TRUE(same_bits(fresh, all_logits(*engine, tokens, 5)));
}

// Prefix reuse with a recurrent state: a prompt that extends all a slot
// holds (the next turn of a chat) reuses it; one that leaves the held
// tokens anywhere earlier is computed again from position 0, since a state
// cannot be cut back. Either way the logits are a fresh run's bits.
TEST(HybridModel, APromptThatExtendsTheSlotReusesItAndAnyOtherIsComputedAgain) {
  const std::string path = random_model_path("random-qwen35");
  SHOAL_NEED_FILE(path);
  auto engine = load_engine(path, 2, 16);
  ASSERT_EQ(engine->pipeline().max_rollback(), 0);
  const std::vector<TokenId> history =
      engine->tokenizer().encode("Once upon a time, there was a little girl named Lily.", true, false);
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
  auto fresh_logits = [&](const std::vector<TokenId>& prompt) {
    auto e = load_engine(path, 2, 16);
    Generator g(e->pipeline(), e->tokenizer(), e->n_ctx());
    int reused = 0;
    return last_logits(g, prompt, &reused);
  };
  Generator warm(engine->pipeline(), engine->tokenizer(), engine->n_ctx());
  int reused = 0;
  last_logits(warm, history, &reused);  // the slot now holds `history`
  std::vector<TokenId> longer = history;
  for (TokenId t : {TokenId{7}, TokenId{21}, TokenId{40}}) longer.push_back(t);
  EXPECT_TRUE(same_bits(last_logits(warm, longer, &reused), fresh_logits(longer)));
  EXPECT_EQ(reused, static_cast<int>(history.size()));  // everything held was reused
  std::vector<TokenId> other(history.begin(), history.end() - 2);
  other.push_back(9);
  EXPECT_TRUE(same_bits(last_logits(warm, other, &reused), fresh_logits(other)));
  EXPECT_EQ(reused, 0);  // diverges inside what the slot held: computed again
}

// Speculative decoding on a hybrid model: a verify step of a guess (the
// next token and four guessed after it, some wrong), taken back to any of
// its positions — by truncate_sequence, or by the next step writing there —
// leaves the state and cache a run that never guessed has: every later
// logit is its bits. For Qwen3.5 and Qwen3-Next (keys in runs, joint ssm_ba).
TEST(HybridModel, AGuessTakenBackToAnyOfItsPositionsLeavesThePlainRunsBits) {
  for (const char* name : {"random-qwen35", "random-qwen3next"}) {
    SCOPED_TRACE(name);
    const std::string path = random_model_path(name);
    SHOAL_NEED_FILE(path);
    auto plain = load_engine(path, 2, 64);
    const std::vector<TokenId> text =
        plain->tokenizer().encode("Once upon a time, there was a little girl named Lily who", true, false);
    const int n_vocab = plain->config().n_vocab, prompt = static_cast<int>(text.size()) - 6;
    // The plain run: the prompt, then one token a step.
    const std::vector<TokenId> head(text.begin(), text.begin() + prompt);
    all_logits(*plain, head, 64);
    std::vector<std::vector<float>> expected;
    for (int i = prompt; i < static_cast<int>(text.size()); ++i) {
      Batch b;
      b.add(text[i], i, 0, true);
      const float* l = plain->pipeline().forward(b);
      expected.emplace_back(l, l + n_vocab);
    }
    EngineOptions o = plain->options();
    o.speculative.type = SpecType::Ngram;
    o.speculative.draft_max = 4;
    for (int accepted = 0; accepted <= 4; ++accepted)
      for (bool implicit : {false, true}) {
        SCOPED_TRACE(::testing::Message() << accepted << " right" << (implicit ? ", cut by the next step" : ""));
        Engine spec(o);
        ASSERT_EQ(spec.rewind_rows(), 5);
        all_logits(spec, head, 64);
        // The guess: text[prompt] and four after it, the first `accepted` right.
        Batch guess;
        for (int j = 0; j < 5; ++j)
          guess.add(j <= accepted ? text[prompt + j] : TokenId{100 + j}, prompt + j, 0, true);
        const float* l = spec.pipeline().forward(guess);
        for (int j = 0; j <= accepted; ++j)
          EXPECT_EQ(std::memcmp(l + static_cast<size_t>(j) * n_vocab, expected[j].data(), n_vocab * sizeof(float)), 0)
              << "row " << j;
        const int keep = prompt + accepted + 1;
        if (!implicit) spec.pipeline().truncate_sequence(0, keep);
        for (int i = keep; i < static_cast<int>(text.size()); ++i) {
          Batch b;
          b.add(text[i], i, 0, true);
          const float* next = spec.pipeline().forward(b);
          EXPECT_EQ(std::memcmp(next, expected[i - prompt].data(), n_vocab * sizeof(float)), 0) << "position " << i;
        }
      }
    {
      // The whole guess taken back (a step run again at its positions).
      SCOPED_TRACE("the whole step");
      Engine spec(o);
      all_logits(spec, head, 64);
      Batch guess;
      for (int j = 0; j < 5; ++j) guess.add(TokenId{100 + j}, prompt + j, 0, true);
      spec.pipeline().forward(guess);
      for (int i = prompt; i < static_cast<int>(text.size()); ++i) {
        Batch b;
        b.add(text[i], i, 0, true);
        const float* next = spec.pipeline().forward(b);
        EXPECT_EQ(std::memcmp(next, expected[i - prompt].data(), n_vocab * sizeof(float)), 0) << "position " << i;
      }
      // A batch whose rows of a sequence go back inside it is refused, naming the state.
      Batch back;
      back.add(text[0], static_cast<int>(text.size()), 0, true);
      back.add(text[1], static_cast<int>(text.size()) + 1, 0, true);
      back.add(text[2], static_cast<int>(text.size()) - 1, 0, true);
      try {
        spec.pipeline().forward(back);
        ADD_FAILURE() << "a batch going back inside itself was run";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("recurrent state only goes on"), std::string::npos) << e.what();
      }
    }
    // Further back than the last step is refused, naming the state.
    Engine spec(o);
    all_logits(spec, text, 3);
    EXPECT_THROW(spec.pipeline().truncate_sequence(0, static_cast<int>(text.size()) - 4), Error);
  }
}

}  // namespace
}  // namespace shoal::testing
