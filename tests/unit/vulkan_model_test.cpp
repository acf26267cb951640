// Whole models on the Vulkan backend (lavapipe here): the same bits for any
// batch composition and for sequences alone or sharing a batch (fixed
// reduction orders in every shader), logits near the CPU backend's, and -ngl
// splitting one model between the GPU and the CPU of one machine.
//
// Against the CPU: on f32 weights both backends compute in f32 and differ
// only in summation order. Over every logit of every position that is at
// most 2.7e-4 of the largest |logit| (measured 2026-12-06 on an AMD EPYC
// Zen 4: stories260K 2.7e-4, the random-weight models 2e-5 to 6e-5; since
// the matmul adds a row as one chain of its chunks, where 16 lane sums
// before gave stories260K 4.6e-5 on 2026-12-04), so 5e-4 of it, under twice
// the worst. Quantized weights are
// compared to the CPU under the golden tests' rule instead (golden_test.cpp):
// the CPU rounds activations to 8 bits, the GPU does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <cstring>

#include "backend/forwarding_backend.h"
#include "backend/vulkan/vulkan_devices.h"
#include "engine/local_stage.h"
#include "gguf/reader.h"
#include "model/weights.h"
#include "model_test_support.h"
#ifndef SHOAL_NO_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace shoal::testing {
namespace {

class VulkanModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!vulkan_tests_run()) GTEST_SKIP() << "no Vulkan device (scripts/setup installs mesa-vulkan-drivers)";
  }
};

std::unique_ptr<Engine> on_vulkan(const std::string& path, int n_batch = 64, int gpu_layers = -1, int n_seq = 1) {
  EngineOptions o;
  o.model_path = path;
  o.threads = 2;
  o.n_batch = n_batch;
  o.n_seq = n_seq;
  o.n_ctx = 256;
  o.device = "vulkan";
  o.gpu_layers = gpu_layers;
  auto e = std::make_unique<Engine>(o);
  if (gpu_layers != 0) {
    EXPECT_NE(e->gpu_backend(), nullptr) << "no Vulkan device: scripts/setup installs mesa-vulkan-drivers (lavapipe)";
  }
  return e;
}

const char* kPrompt = "Once upon a time, there was a little girl named Lily. She loved to play outside.";

// Every architecture, its weights F32 (the Vulkan backend runs every op
// the layers need; a weight type without a matmul shader, MXFP4 among
// them, is widened to f32 on the device). random-gpt-oss-mxfp4 is not F32:
// the CPU feeds its MXFP4 matmuls Q8_0 activations, as ggml does, where the
// device widens MXFP4 to f32, so the two differ by that rounding;
// golden_test.cpp holds it to llama.cpp on the device within the quantized
// files' tolerance.
std::vector<std::string> f32_models() {
  std::vector<std::string> m = {test_data_dir() + "/models/stories260K.gguf"};
  for (const std::string& path : random_model_paths())
    if (std::filesystem::path(path).stem() != "random-gpt-oss-mxfp4") m.push_back(path);
  return m;
}

// A device that lacks an op a stage's layers need: the stage is refused at
// load, naming the op, never run wrong (the Vulkan backend, which now runs
// them all, behind a wrapper that says it runs none of them).
class LacksOptionalOps : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  bool runs(OptionalOp) const override { return false; }
};

TEST_F(VulkanModel, RefusesLayersItLacksAnOpForNamingTheOp) {
  const std::map<std::string, std::string> needs = {{"random-qwen35", "does not run gated_delta_net"},
                                                    {"random-gpt-oss", "does not run attention_sinks"},
                                                    {"random-deepseek2", "does not run latent_attention"}};
  for (const auto& [name, why] : needs) {
    SCOPED_TRACE(name);
    const std::string path = random_model_path(name);
    SHOAL_NEED_FILE(path);
    auto file = gguf::File::open(path);
    const ModelConfig c = ModelConfig::from_gguf(*file);
    LacksOptionalOps device(make_vulkan_backend(0, 64));
    const BindRange range{0, c.n_layer, false};
    ModelWeights weights = bind_weights(*file, c, range);
    prepare_weights(device, weights, c, range);
    try {
      LocalStage stage(device, c, weights, 0, c.n_layer, 1, 256, 64, KvTypes{});
      ADD_FAILURE() << name << " loaded on a device without its ops";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

// The device's logits beside the CPU's for the same model: within 5e-4 of
// the largest logit (f32 arithmetic in another order).
void expect_near_cpu(const std::vector<float>& got, const std::vector<float>& reference, const std::string& what) {
  ASSERT_EQ(got.size(), reference.size());
  double largest = 0, worst = 0;
  for (float v : reference) largest = std::max(largest, std::fabs(double(v)));
  for (size_t i = 0; i < reference.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - reference[i]));
  std::printf("[ vulkan ] %s: max |logit - CPU's| %.2e of max |logit| %.2f\n", what.c_str(), worst, largest);
  EXPECT_LE(worst, 5e-4 * largest);
}

TEST_F(VulkanModel, BatchCompositionsGiveIdenticalBitsAndAgreeWithCpu) {
  for (const auto& path : f32_models()) {
    SCOPED_TRACE(path);
    auto gpu = on_vulkan(path);
    auto cpu = load_engine(path, 2, 64, 1, 256);
    const std::vector<TokenId> tokens = gpu->tokenizer().encode(kPrompt, true, false);
    const auto batched = all_logits(*gpu, tokens, 64);
    gpu->pipeline().truncate_sequence(0, 0);
    EXPECT_TRUE(same_bits(batched, all_logits(*gpu, tokens, 1))) << "batched vs token by token";
    gpu->pipeline().truncate_sequence(0, 0);
    EXPECT_TRUE(same_bits(batched, all_logits(*gpu, tokens, 7))) << "batched vs chunks of 7";
    expect_near_cpu(batched, all_logits(*cpu, tokens, 64), path);
  }
}

// A q8_0 cache whose rows are an odd number of 34-byte blocks: DeepSeek's
// latent row of 128 + 32 values is five. The device pads each row to whole
// words (Backend::kv_row_stride) and caches the host's bytes, so the model
// runs there as on the CPU with the same cache type.
TEST_F(VulkanModel, Q8CacheRowsOfAnOddNumberOfBlocks) {
  const std::string path = random_model_path("random-deepseek2");
  SHOAL_NEED_FILE(path);
  const KvTypes q8{DType::Q8_0, DType::Q8_0};
  auto gpu = load_engine(path, 2, 64, 1, 256, q8, "vulkan");
  auto cpu = load_engine(path, 2, 64, 1, 256, q8);
  const std::vector<TokenId> tokens = gpu->tokenizer().encode(kPrompt, true, false);
  const auto batched = all_logits(*gpu, tokens, 64);
  gpu->pipeline().truncate_sequence(0, 0);
  EXPECT_TRUE(same_bits(batched, all_logits(*gpu, tokens, 7))) << "batched vs chunks of 7";
  expect_near_cpu(batched, all_logits(*cpu, tokens, 64), "q8_0 cache, deepseek2");
}

// --device vulkan keeps the whole model on the device, the head included:
// the CPU backend multiplies no matrix (the counter counts: a CPU run's is not 0).
TEST_F(VulkanModel, TheHeadRunsOnTheDevice) {
  const std::string path = test_data_dir() + "/models/stories260K.gguf";
  auto gpu = on_vulkan(path);
  auto cpu = load_engine(path, 2, 64, 1, 256);
  const std::vector<TokenId> tokens = gpu->tokenizer().encode(kPrompt, true, false);
  all_logits(*gpu, tokens, 64);
  all_logits(*cpu, tokens, 64);
  EXPECT_EQ(&gpu->head_backend(), gpu->gpu_backend());
  EXPECT_EQ(gpu->cpu_backend().matmul_count(), 0u);
  EXPECT_GT(cpu->cpu_backend().matmul_count(), 0u);
}

TEST_F(VulkanModel, SequencesSharingABatchMatchSequencesAlone) {
  const std::string path = test_data_dir() + "/models/stories260K.gguf";
  auto gpu = on_vulkan(path, 64, -1, 2);
  const std::vector<TokenId> a = gpu->tokenizer().encode(kPrompt, true, false);
  const std::vector<TokenId> b = gpu->tokenizer().encode("The dog ran to the big red ball.", true, false);
  const auto alone_a = all_logits(*gpu, a, 64, 0);
  gpu->pipeline().truncate_sequence(0, 0);
  const auto alone_b = all_logits(*gpu, b, 64, 1);
  gpu->pipeline().truncate_sequence(1, 0);
  // Both prompts in one batch, rows interleaved.
  const int n_vocab = gpu->config().n_vocab;
  Batch batch;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size()) batch.add(a[i], static_cast<int>(i), 0, true);
    if (i < b.size()) batch.add(b[i], static_cast<int>(i), 1, true);
  }
  const float* l = gpu->pipeline().forward(batch);
  std::vector<float> mixed_a, mixed_b;
  for (int r = 0; r < batch.size(); ++r)
    (batch.seq_ids[r] == 0 ? mixed_a : mixed_b).insert((batch.seq_ids[r] == 0 ? mixed_a : mixed_b).end(),
                                                       l + static_cast<size_t>(r) * n_vocab,
                                                       l + static_cast<size_t>(r + 1) * n_vocab);
  EXPECT_TRUE(same_bits(alone_a, mixed_a));
  EXPECT_TRUE(same_bits(alone_b, mixed_b));
}

TEST_F(VulkanModel, SmolLM2BatchCompositionsGiveIdenticalBitsAndAgreeWithCpu) {
  const std::string path = models_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  SHOAL_NEED_FILE(path);
  auto gpu = on_vulkan(path);
  const std::vector<TokenId> tokens = gpu->tokenizer().encode("The capital of France is Paris, and", true, false);
  const auto batched = all_logits(*gpu, tokens, 64);
  gpu->pipeline().truncate_sequence(0, 0);
  EXPECT_TRUE(same_bits(batched, all_logits(*gpu, tokens, 3))) << "batched vs chunks of 3";
  // Against the CPU run: quantized weights, so the golden tests' bound for
  // SmolLM2 Q4_1 (3.0, golden_test.cpp: the CPU rounds activations to 8
  // bits before each matmul and this model amplifies one flipped rounding
  // ~100-fold), and each position's greedy choice the same unless the CPU's
  // own top two are closer than that.
  auto cpu = load_engine(path, 2, 64, 1, 256);
  const auto reference = all_logits(*cpu, tokens, 64);
  const int n_vocab = cpu->config().n_vocab;
  double worst = 0;
  for (size_t i = 0; i < reference.size(); ++i) worst = std::max(worst, std::fabs(double(batched[i]) - reference[i]));
  std::printf("[ vulkan ] SmolLM2 Q4_1: max |logit - CPU's| %.3f\n", worst);
  EXPECT_LE(worst, 3.0);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const float* c = reference.data() + t * n_vocab;
    const float* g = batched.data() + t * n_vocab;
    const int c_best = static_cast<int>(std::max_element(c, c + n_vocab) - c);
    const int g_best = static_cast<int>(std::max_element(g, g + n_vocab) - g);
    if (c_best == g_best) continue;
    std::vector<float> sorted(c, c + n_vocab);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    EXPECT_LE(sorted[0] - sorted[1], 3.0) << "position " << t << ": a clear CPU choice the GPU did not make";
  }
}

#ifndef SHOAL_NO_VULKAN  // the counters and the recorded step are VulkanBackend's
// Runs `steps` decode steps after a prompt and its first decode step (which
// records the plan) and checks what every step must be on any model: one
// submission, one host wait (the logits' download), its plan replayed,
// nothing made, and no driver allocation per dispatch.
struct DecodeStep {
  VulkanBackend* vk = nullptr;
  uint64_t barriers = 0;  // per step
};
DecodeStep check_decode_steps(Engine& gpu, const char* name, int steps = 4) {
  auto* vk = dynamic_cast<VulkanBackend*>(gpu.gpu_backend());
  EXPECT_NE(vk, nullptr);
  if (!vk) return {};
  const std::vector<TokenId> prompt = gpu.tokenizer().encode("The capital of France is", true, false);
  all_logits(gpu, prompt, 64);
  int pos = static_cast<int>(prompt.size());
  auto decode = [&] {
    Batch b;
    b.add(prompt.back(), pos++, 0, true);
    gpu.pipeline().forward(b);
  };
  decode();
  const DeviceCounters before = *vk->device_counters();
  for (int i = 0; i < steps; ++i) decode();
  const DeviceCounters after = *vk->device_counters();
  const auto n = static_cast<uint64_t>(steps);
  EXPECT_EQ(after.steps - before.steps, n);
  EXPECT_EQ(after.submissions - before.submissions, n) << "one submission per step";
  EXPECT_EQ(after.host_waits - before.host_waits, n) << "one host wait per step";
  EXPECT_EQ(after.plans_recorded, before.plans_recorded) << "a decode step replays its plan";
  EXPECT_EQ(after.descriptor_sets, before.descriptor_sets);
  EXPECT_EQ(after.pipelines_compiled, before.pipelines_compiled);
  const uint64_t dispatches = (after.dispatches - before.dispatches) / n;
  const uint64_t allocations = (after.driver_allocations - before.driver_allocations) / n;
  std::printf("[ vulkan ] %s decode step: %llu dispatches, %llu barriers, %llu copies, %llu driver allocations\n", name,
              (unsigned long long)dispatches, (unsigned long long)((after.barriers - before.barriers) / n),
              (unsigned long long)((after.copies - before.copies) / n), (unsigned long long)allocations);
  EXPECT_GT(dispatches, 10u);
  EXPECT_LE(allocations, 2u) << "the driver's allocations per step must not grow with its dispatches";
  return {vk, (after.barriers - before.barriers) / n};
}

// A decode step is one submission and one host wait; a barrier stands only
// before a command that truly depends on one before it in the step, and
// every dependency is crossed by one.
TEST_F(VulkanModel, SmolLM2DecodeStepIsOneSubmissionWithBarriersOnlyAtDependencies) {
  const std::string path = models_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  SHOAL_NEED_FILE(path);
  auto gpu = on_vulkan(path);
  const DecodeStep measured = check_decode_steps(*gpu, "SmolLM2");
  ASSERT_NE(measured.vk, nullptr);
  // The bound from the step's graph: a command depends on an earlier one
  // when it reads what that one wrote, or writes what it read or wrote.
  const auto step = measured.vk->last_submission();
  auto depends = [](const VulkanCommand& later, const VulkanCommand& earlier) {
    for (int w = 0; w < earlier.n_writes; ++w) {
      for (int r = 0; r < later.n_reads; ++r)
        if (earlier.writes[w].overlaps(later.reads[r])) return true;
      for (int v = 0; v < later.n_writes; ++v)
        if (earlier.writes[w].overlaps(later.writes[v])) return true;
    }
    for (int r = 0; r < earlier.n_reads; ++r)
      for (int v = 0; v < later.n_writes; ++v)
        if (earlier.reads[r].overlaps(later.writes[v])) return true;
    return false;
  };
  uint64_t dependent = 0, barriers = 1;  // the closing barrier, for the host
  size_t last_barrier = 0;
  for (size_t i = 0; i < step.size(); ++i) {
    bool has_dependency = false;
    for (size_t j = 0; j < i; ++j) {
      if (!depends(step[i], step[j])) continue;
      has_dependency = true;
      // Some barrier stands between them.
      if (j >= last_barrier && !step[i].barrier_before)
        ADD_FAILURE() << "command " << i << " depends on command " << j << " with no barrier between";
    }
    dependent += has_dependency;
    if (step[i].barrier_before) {
      ++barriers;
      last_barrier = i;
      EXPECT_TRUE(has_dependency) << "a barrier before command " << i << ", which depends on nothing";
    }
  }
  EXPECT_EQ(barriers, measured.barriers);
  EXPECT_LE(barriers, dependent + 1);
}

// A mixture of experts routes on the device: its decode step too is one
// submission and one wait (the router's choice never comes back mid-step).
TEST_F(VulkanModel, MixtureOfExpertsDecodeStepRoutesOnTheDevice) {
  for (const char* name : {"random-qwen3moe", "random-mixtral"}) {
    SCOPED_TRACE(name);
    const std::string path = random_model_path(name);
    SHOAL_NEED_FILE(path);
    auto gpu = on_vulkan(path);
    check_decode_steps(*gpu, name);
  }
}
#endif

TEST_F(VulkanModel, GpuLayersSplitOneMachineBetweenGpuAndCpu) {
  const std::string path = test_data_dir() + "/models/stories260K.gguf";
  auto split = on_vulkan(path, 64, 3);  // stories260K has 5 layers: 0-1 on the CPU, 2-4 on the GPU
  const auto& stages = split->pipeline().stages();
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0]->layer_end(), 2);
  EXPECT_EQ(stages[0]->devices()[0].backend, "CPU");
  EXPECT_EQ(stages[1]->layer_begin(), 2);
  EXPECT_NE(stages[1]->devices()[0].backend, "CPU");
  auto cpu = load_engine(path, 2, 64, 1, 256);
  const std::vector<TokenId> tokens = cpu->tokenizer().encode(kPrompt, true, false);
  const auto reference = all_logits(*cpu, tokens, 64);
  const auto mixed = all_logits(*split, tokens, 64);
  double largest = 0, worst = 0;
  for (float v : reference) largest = std::max(largest, std::fabs(double(v)));
  for (size_t i = 0; i < reference.size(); ++i) worst = std::max(worst, std::fabs(double(mixed[i]) - reference[i]));
  EXPECT_LE(worst, 5e-4 * largest);
  EXPECT_GT(worst, 0.0) << "the GPU layers should round differently from the CPU's";
  // -ngl 0 is the CPU alone: the CPU's bits.
  auto none = on_vulkan(path, 64, 0);
  EXPECT_EQ(none->gpu_backend(), nullptr);
  EXPECT_TRUE(same_bits(reference, all_logits(*none, tokens, 64)));
}

}  // namespace
}  // namespace shoal::testing
