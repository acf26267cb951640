// A tensor split gives the local bits (docs/design.md): the layers of every
// architecture run by 2 and 4 members, each with its share of every
// matmul's rows and of a mixture's experts (TensorSplitBackend), give logits
// equal bit for bit to one machine's. The members here are threads trading shares in memory; the
// same backend over sealed links between workers is tested in
// tests/e2e/test_tensor_split.py.
#include <gtest/gtest.h>

#include <fmt/ranges.h>

#include <barrier>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/tensor_split_backend.h"
#include "backend/vulkan/vulkan_devices.h"
#include "engine/local_stage.h"
#include "model/kv_cache.h"
#include "model/recurrent_state.h"
#include "model/weights.h"
#include "model_test_support.h"

namespace shoal::testing {
namespace {

// Members post their share, wait for all, copy the others', and wait again
// before anyone posts the next.
class MemoryExchange {
 public:
  explicit MemoryExchange(int size) : posted_(size), barrier_(size) {}
  class Member : public RowExchange {
   public:
    Member(MemoryExchange& hub, int rank) : hub_(hub), rank_(rank) {}
    void all_gather(std::span<const float> mine, std::span<const std::span<float>> from) override {
      hub_.posted_[rank_] = mine;
      hub_.barrier_.arrive_and_wait();
      for (size_t p = 0; p < from.size(); ++p) {
        if (static_cast<int>(p) == rank_) continue;
        EXPECT_EQ(hub_.posted_[p].size(), from[p].size());
        std::copy(hub_.posted_[p].begin(), hub_.posted_[p].end(), from[p].begin());
      }
      hub_.barrier_.arrive_and_wait();
    }

   private:
    MemoryExchange& hub_;
    int rank_;
  };

 private:
  std::vector<std::span<const float>> posted_;
  std::barrier<> barrier_;
};

// Every layer of the model on members sharing the rows by `weights`, each
// on its own thread pool and its own binding of the weights; all finish
// with the same rows, and member 0's are the stage's.
class ThreadGroupStage : public Stage {
 public:
  ThreadGroupStage(Engine& e, const ShareWeights& weights, bool vulkan = false)
      : hub_(static_cast<int>(weights.size())), n_layer_(e.config().n_layer), n_embd_(e.config().n_embd) {
    const ModelConfig& c = e.config();
    const BindRange range{0, c.n_layer, false};
    for (int r = 0; r < static_cast<int>(weights.size()); ++r) {
      auto m = std::make_unique<MemberState>();
      m->pool = std::make_unique<ThreadPool>(r % 2 + 1);  // thread counts differ too
      m->backend = std::make_unique<TensorSplitBackend>(
          vulkan ? make_vulkan_backend(0, e.n_batch())
                 : std::make_unique<CpuBackend>(*m->pool, e.n_batch(), c.max_activation_width()),
          std::make_shared<MemoryExchange::Member>(hub_, r), r, weights);
      // With three members, the middle one reads its shares where they are (no copy in groups of eight:
      // a worker whose lent memory cannot take it): the same bits.
      if (weights.size() == 3 && r == 1 && !vulkan) m->backend->set_copy_shares(false);
      m->weights = bind_weights(e.file(), c, range);
      prepare_weights(*m->backend, m->weights, c, range);
      m->stage = std::make_unique<LocalStage>(*m->backend, c, m->weights, 0, c.n_layer, e.options().n_seq, e.n_ctx(),
                                              e.n_batch(), e.options().kv_types, kv_heads_held(c, r, weights));
      members_.push_back(std::move(m));
    }
  }
  int layer_begin() const override { return 0; }
  int layer_end() const override { return n_layer_; }
  std::string describe() const override { return "tensor group in threads"; }
  std::vector<StageDevice> devices() const override { return {}; }
  void forward(const Batch& batch, float* hidden) override {
    const size_t floats = static_cast<size_t>(batch.size()) * n_embd_;
    std::vector<std::vector<float>> rows(members_.size(), std::vector<float>(hidden, hidden + floats));
    std::vector<std::thread> threads;
    for (size_t r = 1; r < members_.size(); ++r)
      threads.emplace_back([&, r] { members_[r]->stage->forward(batch, rows[r].data()); });
    members_[0]->stage->forward(batch, rows[0].data());
    for (auto& t : threads) t.join();
    // Only the rows that want logits are finished (Stage::forward).
    for (int t = 0; t < batch.size(); ++t)
      if (batch.logits[t]) {
        for (size_t r = 1; r < members_.size(); ++r) {
          EXPECT_EQ(0, std::memcmp(rows[0].data() + t * n_embd_, rows[r].data() + t * n_embd_,
                                   n_embd_ * sizeof(float)))
              << "member " << r << " row " << t;
        }
      }
    std::copy(rows[0].begin(), rows[0].end(), hidden);
  }
  void truncate_sequence(int seq, int n_pos) override {
    for (auto& m : members_) m->stage->truncate_sequence(seq, n_pos);
  }
  uint64_t exchanges() const { return members_[0]->backend->exchanges(); }
  // Whether the last member runs expert 0 of n (it does not when the experts are divided).
  bool last_holds_expert_0(int n_expert) const { return members_.back()->backend->holds_expert(0, n_expert); }
  size_t kv_bytes(int rank) const { return members_.at(rank)->stage->kv_bytes(); }

 private:
  struct MemberState {
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<TensorSplitBackend> backend;
    ModelWeights weights;
    std::unique_ptr<LocalStage> stage;
  };
  MemoryExchange hub_;
  int n_layer_, n_embd_;
  std::vector<std::unique_ptr<MemberState>> members_;
};

std::vector<std::string> models() {
  std::vector<std::string> m = {test_data_dir() + "/models/stories260K.gguf"};
  for (const char* name : {"SmolLM2-135M-Instruct.Q4_1.gguf", "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"})
    if (file_exists(models_dir() + "/" + name)) m.push_back(models_dir() + "/" + name);
  for (const std::string& path : random_model_paths()) m.push_back(path);
  return m;
}

// Every query head is one member's, with the KV heads it reads; whole KV
// heads each where there are enough, so none is held twice.
TEST(HeadShare, EveryQueryHeadOnceWithTheKvHeadsItReads) {
  for (const AttentionHeads& h : {AttentionHeads{9, 3, 64, 64}, AttentionHeads{14, 2, 64, 64},
                                  AttentionHeads{4, 1, 256, 256}, AttentionHeads{32, 8, 128, 256},
                                  AttentionHeads{64, 8, 64, 64}})
    for (const ShareWeights& weights : {even_shares(2), even_shares(3), even_shares(4), ShareWeights{1, 4, 2},
                                        ShareWeights{20, 1}}) {
      const int size = static_cast<int>(weights.size());
      SCOPED_TRACE(fmt::format("{}/{} heads, {}", h.n_head, h.n_head_kv, fmt::join(weights, ":")));
      ASSERT_TRUE(head_split(h, size));
      const int group = h.n_head / h.n_head_kv;
      int next_q = 0, next_kv = 0;
      for (int r = 0; r < size; ++r) {
        const HeadShare s = head_share(h, r, weights);
        EXPECT_EQ(s.q_begin, next_q);
        EXPECT_GE(s.q_heads(), 1);
        EXPECT_EQ(s.kv_begin, s.q_begin / group);
        EXPECT_EQ(s.kv_end, (s.q_end - 1) / group + 1);
        if (h.n_head_kv >= size) {  // whole KV heads: none twice
          EXPECT_EQ(s.kv_begin, next_kv);
          EXPECT_EQ(s.q_begin, s.kv_begin * group);
          next_kv = s.kv_end;
        }
        next_q = s.q_end;
      }
      EXPECT_EQ(next_q, h.n_head);
    }
  // SmolLM2's 9/3 heads on 4 members: query heads 0-1, 2-3, 4-5, 6-8 (even), KV heads 0, 0-1, 1, 2.
  const HeadShare second = head_share({9, 3, 64, 64}, 1, even_shares(4));
  EXPECT_EQ(second.q_begin, 2);
  EXPECT_EQ(second.q_end, 4);
  EXPECT_EQ(second.kv_begin, 0);
  EXPECT_EQ(second.kv_end, 2);
  EXPECT_FALSE(head_split({3, 1, 64, 64}, 4));   // a query head for each member, or attention stays whole
  EXPECT_FALSE(head_split({8, 8, 36, 36}, 2));   // a head's rows in whole groups of eight
}

TEST(RowShare, SharesCoverTheRowsInWholeUnits) {
  for (int64_t rows : {48, 100, 128, 576, 896, 4864, 151936})
    for (const ShareWeights& weights : {ShareWeights{1}, ShareWeights{1, 1}, ShareWeights{1, 1, 1},
                                        ShareWeights{1, 1, 1, 1}, ShareWeights{20, 7}, ShareWeights{1, 20},
                                        ShareWeights{3, 1, 2, 20}}) {
      const int size = static_cast<int>(weights.size());
      if (!row_split(rows, size) && size > 1) continue;
      const int64_t units = (rows + kRowShareUnit - 1) / kRowShareUnit;
      int64_t next = 0, total = 0;
      for (int w : weights) total += w;
      for (int r = 0; r < size; ++r) {
        const RowShare s = row_share(rows, r, weights);
        EXPECT_EQ(s.begin, next);
        if (r + 1 < size) {
          EXPECT_EQ(s.end % kRowShareUnit, 0);
        }
        // Every member at least one unit (the last one's may be cut short by the matrix's end).
        EXPECT_GE(s.rows(), r + 1 == size ? 1 : kRowShareUnit);
        // One unit and its weight's part of the rest, to within a unit.
        const double exact = 1 + static_cast<double>(units - size) * weights[r] / total;
        EXPECT_NEAR(static_cast<double>(s.rows()) / kRowShareUnit, exact, 1.0 + (r + 1 == size ? 1.0 : 0.0));
        next = s.end;
      }
      EXPECT_EQ(next, rows);
    }
  // Equal weights: ⌊U·r/k⌋ units, as the protocol states.
  for (int64_t rows : {576, 896, 4864, 151936})
    for (int size : {2, 3, 4})
      for (int r = 0; r < size; ++r) {
        const int64_t units = (rows + kRowShareUnit - 1) / kRowShareUnit;
        EXPECT_EQ(row_share(rows, r, even_shares(size)).begin, units * r / size * kRowShareUnit);
        EXPECT_EQ(expert_share(128, r, even_shares(size)).begin, 128 * r / size);
      }
  // Experts by weight: one each, the other 6 as 20:1 (5.7 and 0.3, rounded down; the last takes the rest).
  const RowShare fast = expert_share(8, 0, {20, 1}), slow = expert_share(8, 1, {20, 1});
  EXPECT_EQ(fast.begin, 0);
  EXPECT_EQ(fast.end, 6);
  EXPECT_EQ(slow.begin, 6);
  EXPECT_EQ(slow.end, 8);
  EXPECT_FALSE(row_split(47, 2));
  EXPECT_TRUE(row_split(48, 2));
  EXPECT_FALSE(row_split(4864, 1));
}

// A prompt in chunks of 64 and then token by token (decode steps), on 2 and
// 4 members: the same logits bits as one machine.
TEST(TensorSplit, GroupsGiveTheLocalBits) {
  for (const std::string& path : models()) {
    SCOPED_TRACE(path);
    auto local = load_engine(path, 2, 64);
    const std::vector<TokenId> tokens = local->tokenizer().encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her dog, "
        "a big brown dog called Max. One day they went to the park.",
        true, false);
    std::vector<float> expected = all_logits(*local, std::vector<TokenId>(tokens.begin(), tokens.end() - 4), 64);
    for (int t = static_cast<int>(tokens.size()) - 4; t < static_cast<int>(tokens.size()); ++t) {
      Batch b;
      b.add(tokens[t], t, 0, true);
      const float* l = local->pipeline().forward(b);
      expected.insert(expected.end(), l, l + local->config().n_vocab);
    }
    // Even shares on 2 and 4 members; uneven ones (a faster member takes more rows) on 3.
    for (const ShareWeights& weights : {even_shares(2), even_shares(4), ShareWeights{1, 4, 2}}) {
      const int size = static_cast<int>(weights.size());
      SCOPED_TRACE(fmt::format("{}", fmt::join(weights, ":")));
      ThreadGroupStage* group = nullptr;
      EngineOptions o = local->options();
      Engine split(o, [&](Engine& e) {
        std::vector<std::unique_ptr<Stage>> stages;
        auto s = std::make_unique<ThreadGroupStage>(e, weights);
        group = s.get();
        stages.push_back(std::move(s));
        return stages;
      });
      std::vector<float> got = all_logits(split, std::vector<TokenId>(tokens.begin(), tokens.end() - 4), 64);
      for (int t = static_cast<int>(tokens.size()) - 4; t < static_cast<int>(tokens.size()); ++t) {
        Batch b;
        b.add(tokens[t], t, 0, true);
        const float* l = split.pipeline().forward(b);
        got.insert(got.end(), l, l + split.config().n_vocab);
      }
      EXPECT_TRUE(same_bits(expected, got));
      EXPECT_GT(group->exchanges(), 0u);
      // A mixture's experts are divided among the members (by expert) when there are enough of them.
      const int n_expert = local->config().n_expert;
      if (n_expert > 0) {
        EXPECT_EQ(group->last_holds_expert_0(n_expert), n_expert < size) << n_expert;
      }
      // Attention divided by heads: each member caches only the KV heads its query heads read.
      const ModelConfig& c = local->config();
      const AttentionHeads heads = attention_heads(c);
      size_t members_kv = 0;
      for (int r = 0; r < size; ++r) {
        const int held = head_split(heads, size) ? head_share(heads, r, weights).kv_heads() : c.n_head_kv;
        EXPECT_EQ(group->kv_bytes(r), KvCache::bytes_for(c, 0, c.n_layer, o.n_seq, split.n_ctx(), split.n_batch(),
                                                         o.kv_types, held) +
                                          RecurrentState::bytes_for(c, 0, c.n_layer, o.n_seq));
        members_kv += group->kv_bytes(r);
      }
      const size_t local_kv = KvCache::bytes_for(c, 0, c.n_layer, o.n_seq, split.n_ctx(), split.n_batch(), o.kv_types);
      // With a KV head for each member, no KV head is held twice.
      if (head_split(heads, size) && c.n_head_kv >= size && !c.has_recurrent_layers()) {
        EXPECT_EQ(members_kv, local_kv);
      }
    }
  }
}

#ifndef SHOAL_NO_VULKAN  // a build without the Vulkan backend has no GPU member to run
// Members on a GPU (lavapipe here) give the bits of one machine on that
// GPU: a member runs the same shaders on its rows and its heads (SmolLM2's
// 9/3 heads on 4 members: a member's query heads read two KV heads, one at a
// time, the second at an offset into its cache's rows).
TEST(TensorSplit, GpuMembersGiveTheLocalGpuBits) {
  if (!vulkan_tests_run()) GTEST_SKIP() << "no Vulkan device (scripts/setup installs mesa-vulkan-drivers)";
  std::vector<std::string> paths = {test_data_dir() + "/models/stories260K.gguf"};
  // gemma3's windows; gpt-oss's sinks, each member reading its heads' share
  // of them; qwen3next's DeltaNet with its beta and alpha copied out in strides.
  for (const std::string& path : random_model_paths())
    if (path.find("random-gemma3") != std::string::npos || path.ends_with("random-gpt-oss.gguf") ||
        path.find("random-qwen3next") != std::string::npos)
      paths.push_back(path);
  if (file_exists(models_dir() + "/SmolLM2-135M-Instruct.F32.gguf"))
    paths.push_back(models_dir() + "/SmolLM2-135M-Instruct.F32.gguf");
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    auto local = load_engine(path, 2, 64, 1, 128, {}, "vulkan");
    const std::vector<TokenId> tokens =
        local->tokenizer().encode("Once upon a time, there was a little girl named Lily.", true, false);
    const std::vector<TokenId> prompt(tokens.begin(), tokens.end() - 2);
    auto run = [&](Engine& e) {
      std::vector<float> logits = all_logits(e, prompt, 64);
      for (int t = static_cast<int>(prompt.size()); t < static_cast<int>(tokens.size()); ++t) {
        Batch b;
        b.add(tokens[t], t, 0, true);
        const float* l = e.pipeline().forward(b);
        logits.insert(logits.end(), l, l + e.config().n_vocab);
      }
      return logits;
    };
    const std::vector<float> expected = run(*local);
    // SmolLM2 (lavapipe's slowest here) on the 4 members that need the offset only.
    const bool smollm2 = path.find("SmolLM2") != std::string::npos;
    for (const ShareWeights& weights : smollm2 ? std::vector<ShareWeights>{even_shares(4)}
                                               : std::vector<ShareWeights>{even_shares(2), even_shares(4), {1, 4, 2}}) {
      SCOPED_TRACE(fmt::format("{}", fmt::join(weights, ":")));
      Engine split(local->options(), [&](Engine& e) {
        std::vector<std::unique_ptr<Stage>> stages;
        stages.push_back(std::make_unique<ThreadGroupStage>(e, weights, true));
        return stages;
      });
      EXPECT_TRUE(same_bits(expected, run(split)));
    }
  }
}
#endif

}  // namespace
}  // namespace shoal::testing
