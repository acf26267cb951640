// The model's own multi-token-prediction block as the draft (--spec-type
// mtp): on random-weight files that carry one, its first guess's logits
// are llama.cpp's (tests/golden/make_mtp_reference.py: the same prompt, the
// block caught up on it as common/speculative.cpp's draft-mtp does) and its
// guesses are llama.cpp's; a file without the block is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/mtp_drafter.h"
#include "model_test_support.h"
#include "util/error.h"

namespace shoal::testing {
namespace {

std::unique_ptr<Engine> mtp_engine(const std::string& path, int threads) {
  EngineOptions o;
  o.model_path = path;
  o.threads = threads;
  o.n_batch = 64;
  o.n_ctx = 256;
  o.kv_types = {DType::F32, DType::F32};  // as the reference's caches
  o.speculative.type = SpecType::Mtp;
  o.speculative.draft_max = 4;
  return std::make_unique<Engine>(o);
}

// llama.cpp's logits on these F32 files agree with Shoal's to a few 1e-6
// (the golden tests' tolerance, 4e-5, is set from that); the block adds one
// layer and a norm of the model's own kind.
constexpr float kTolerance = 4e-5f;

TEST(MtpDraft, FirstGuessIsLlamaCpps) {
  for (const char* name : {"random-qwen35", "random-qwen35moe", "random-glm4moe", "random-deepseek2"}) {
    SCOPED_TRACE(name);
    const std::string path = random_model_path(name);
    SHOAL_NEED_FILE(path);
    const nlohmann::json ref = read_json(source_dir() + "/tests/golden/mtp/" + name + ".json");
    const std::vector<TokenId> prompt = ref["prompt_tokens"].get<std::vector<TokenId>>();
    for (int threads : {1, 2}) {
      SCOPED_TRACE(threads);
      auto e = mtp_engine(path, threads);
      auto* mtp = dynamic_cast<MtpDrafter*>(e->drafter());
      ASSERT_NE(mtp, nullptr);
      const int n_vocab = e->config().n_vocab, width = e->config().n_embd;
      // The prompt through the model, every row's hidden state shown to the block.
      Batch b;
      for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int>(i), 0, i + 1 == prompt.size());
      b.all_rows = true;
      const float* logits = e->pipeline().forward(b);
      const TokenId next = static_cast<TokenId>(std::max_element(logits, logits + n_vocab) - logits);
      ASSERT_EQ(next, ref["next_token"].get<TokenId>());
      mtp->see(b, e->pipeline().normed_rows());
      // The first guess: the next token beside the hidden state that chose it.
      const float* last = e->pipeline().normed_rows() + (prompt.size() - 1) * width;
      const std::vector<float> hidden(last, last + width);
      Batch first;
      first.add(next, static_cast<int>(prompt.size()), 0, true);
      const float* got = mtp->step(first, hidden.data());
      const std::vector<float> want = ref["mtp_first_logits"].get<std::vector<float>>();
      ASSERT_EQ(want.size(), static_cast<size_t>(n_vocab));
      float worst = 0;
      for (int i = 0; i < n_vocab; ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
      EXPECT_LT(worst, kTolerance);
      RecordProperty(std::string(name) + "_t" + std::to_string(threads) + "_max_diff", std::to_string(worst));
      // Four guesses, the block going on from its own hidden state.
      std::vector<TokenId> history = prompt, guess;
      history.push_back(next);
      DraftJob job{0, history, 4, 0, 0.0f, &guess};
      mtp->propose(std::span<DraftJob>(&job, 1));
      EXPECT_EQ(guess, ref["mtp_draft"].get<std::vector<TokenId>>());
    }
  }
}

TEST(MtpDraft, RefusesAFileWithoutTheBlock) {
  const std::string path = random_model_path("random-qwen3");
  SHOAL_NEED_FILE(path);
  try {
    mtp_engine(path, 1);
    ADD_FAILURE() << "a file without MTP layers was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has none"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--spec-type ngram"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shoal::testing
