// The planner (which layers go where), the model side of its input, and the
// local device probe.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "cluster/device_info.h"
#include "cluster/primary/plan_input.h"
#include "cluster/primary/cost_model.h"
#include "cluster/primary/prompt_placement.h"
#include "cluster/primary/planner.h"
#include "cluster/primary/split_choice.h"
#include "gguf/reader.h"
#include "model/config.h"
#include "model/tensor_names.h"
#include "model_test_support.h"
#include "util/error.h"

namespace shoal {
namespace {

constexpr uint64_t MiB = 1ull << 20;

DeviceInfo device(const std::string& address, uint64_t free_mib, double gbps = 10.0, double rtt_ms = 0.0) {
  DeviceInfo d;
  d.address = address;
  d.backend = "CPU";
  d.free_memory = d.total_memory = free_mib * MiB;
  d.matvec_gbps = gbps;
  d.rtt_ms = rtt_ms;
  return d;
}

PlanInput uniform_input(int n_layers, uint64_t layer_mib, std::vector<DeviceInfo> devices) {
  PlanInput in;
  in.layer_bytes.assign(n_layers, layer_mib * MiB);
  in.devices = std::move(devices);
  return in;
}

std::vector<int> layer_counts(const Plan& plan) {
  std::vector<int> n;
  for (const auto& s : plan.stages) n.push_back(s.layer_end - s.layer_begin);
  return n;
}

// The message of the shoal::Error that make_plan throws ("" if none).
std::string plan_error(const PlanInput& in) {
  try {
    make_plan(in);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PlannerTest, EqualMemorySplitsEvenly) {
  PlanInput in = uniform_input(10, 100, {device("local", 2000), device("10.0.0.2:50052", 2000)});
  const Plan plan = make_plan(in);
  ASSERT_EQ(plan.stages.size(), 2u);
  EXPECT_EQ(layer_counts(plan), (std::vector<int>{5, 5}));
  EXPECT_EQ(plan.stages[0].layer_begin, 0);
  EXPECT_EQ(plan.stages[1].layer_begin, 5);
  EXPECT_EQ(plan.stages[1].layer_end, 10);
  EXPECT_EQ(plan.stages[0].weight_bytes, 500 * MiB);
  EXPECT_EQ(plan.stages[1].free_after, 1500 * MiB);
}

TEST(PlannerTest, UnequalMemorySplitsInProportion) {
  // Usable 3000 : 1000 after the primary's 1000 MiB and the 500 MiB reserve.
  PlanInput in = uniform_input(8, 100, {device("local", 4500), device("w1:1", 1500)});
  in.primary_bytes = 1000 * MiB;
  in.reserve_bytes = 500 * MiB;
  EXPECT_EQ(layer_counts(make_plan(in)), (std::vector<int>{6, 2}));
}

TEST(PlannerTest, UnevenLayersAreMovedToWhereThereIsRoom) {
  // By count each device would get 4 layers, but the last four are heavy:
  // 16 MiB on the second device, which has 12. One layer moves forward.
  PlanInput in;
  in.layer_bytes = {1 * MiB, 1 * MiB, 1 * MiB, 1 * MiB, 4 * MiB, 4 * MiB, 4 * MiB, 4 * MiB};
  in.devices = {device("local", 12), device("w1:1", 12)};
  const Plan plan = make_plan(in);
  EXPECT_EQ(layer_counts(plan), (std::vector<int>{5, 3}));
  EXPECT_EQ(plan.stages[0].weight_bytes, 8 * MiB);
  EXPECT_EQ(plan.stages[1].weight_bytes, 12 * MiB);
}

TEST(PlannerTest, DeviceWithNothingUsableGetsNoLayers) {
  PlanInput in = uniform_input(6, 100, {device("local", 1000), device("w1:1", 400), device("w2:1", 1000)});
  in.reserve_bytes = 500 * MiB;  // w1 has less than the reserve
  const Plan plan = make_plan(in);
  EXPECT_EQ(layer_counts(plan), (std::vector<int>{3, 0, 3}));
  EXPECT_EQ(plan.stages[1].weight_bytes, 0u);
  EXPECT_EQ(plan.stages[1].free_after, 400 * MiB);
}

// Whether some contiguous split in device order fits: filling each device
// as far as it goes from the front covers the most layers any split can.
bool any_split_fits(const PlanInput& in) {
  size_t l = 0;
  for (size_t d = 0; d < in.devices.size(); ++d) {
    int64_t room = static_cast<int64_t>(in.devices[d].free_memory) - static_cast<int64_t>(in.reserve_bytes) -
                   (d == 0 ? static_cast<int64_t>(in.primary_bytes) : 0);
    if (d == 0 && room < 0) return false;
    while (l < in.layer_bytes.size() && room >= static_cast<int64_t>(in.layer_bytes[l] + in.layer_kv_bytes[l]) &&
           room > 0) {
      room -= static_cast<int64_t>(in.layer_bytes[l] + in.layer_kv_bytes[l]);
      ++l;
    }
  }
  return l == in.layer_bytes.size();
}

TEST(PlannerTest, NeverOverAnyDeviceAcrossRandomClusters) {
  std::mt19937 rng(1234);
  int planned = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto uniform = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
    PlanInput in;
    const int n_layers = static_cast<int>(uniform(1, 48));
    const uint64_t base = uniform(1, 64);
    for (int l = 0; l < n_layers; ++l) in.layer_bytes.push_back((base + uniform(0, base)) * MiB / 4);
    for (int l = 0; l < n_layers; ++l) in.layer_kv_bytes.push_back(uniform(0, 8) * MiB / 4);
    in.primary_bytes = uniform(0, 200) * MiB;
    in.reserve_bytes = uniform(0, 2) * 64 * MiB;
    const int n_devices = static_cast<int>(uniform(1, 5));
    for (int d = 0; d < n_devices; ++d) in.devices.push_back(device(fmt::format("d{}", d), uniform(0, 1200)));

    Plan plan;
    try {
      plan = make_plan(in);
    } catch (const Error& e) {
      ++refused;
      EXPECT_FALSE(any_split_fits(in)) << "trial " << trial << " refused a cluster that fits: " << e.what();
      continue;
    }
    ++planned;
    ASSERT_EQ(plan.stages.size(), in.devices.size());
    int next = 0;
    for (size_t d = 0; d < plan.stages.size(); ++d) {
      const StageAssignment& s = plan.stages[d];
      EXPECT_EQ(s.layer_begin, next) << "trial " << trial << ": layers not contiguous";
      EXPECT_LE(s.layer_begin, s.layer_end);
      next = s.layer_end;
      const int64_t usable = static_cast<int64_t>(in.devices[d].free_memory) -
                             static_cast<int64_t>(in.reserve_bytes) -
                             (d == 0 ? static_cast<int64_t>(in.primary_bytes) : 0);
      uint64_t used = s.kv_bytes;
      for (int l = s.layer_begin; l < s.layer_end; ++l) used += in.layer_bytes[l];
      if (s.layer_end > s.layer_begin) {
        EXPECT_GT(usable, 0) << "trial " << trial;
        EXPECT_LE(used, static_cast<uint64_t>(std::max<int64_t>(0, usable))) << "trial " << trial << " device " << d;
      }
    }
    EXPECT_EQ(next, n_layers) << "trial " << trial << ": not every layer placed";
  }
  // The sweep must exercise both outcomes to mean anything.
  EXPECT_GT(planned, 300);
  EXPECT_GT(refused, 300);
}

TEST(PlannerTest, TensorSplitThreeToOne) {
  PlanInput in = uniform_input(8, 100, {device("local", 10000), device("w1:1", 10000)});
  in.tensor_split = {3, 1};
  EXPECT_EQ(layer_counts(make_plan(in)), (std::vector<int>{6, 2}));
}

TEST(PlannerTest, TensorSplitZeroMeansNoLayers) {
  PlanInput in = uniform_input(10, 100, {device("local", 10000), device("w1:1", 10000), device("w2:1", 10000)});
  in.tensor_split = {0, 1, 1};
  const Plan plan = make_plan(in);
  EXPECT_EQ(layer_counts(plan), (std::vector<int>{0, 5, 5}));
  EXPECT_EQ(plan.stages[1].layer_begin, 0);
}

TEST(PlannerTest, TensorSplitOfWrongLengthNamesBothCounts) {
  PlanInput in = uniform_input(10, 100, {device("local", 10000), device("w1:1", 10000), device("w2:1", 10000)});
  in.tensor_split = {3, 1};
  const std::string error = plan_error(in);
  EXPECT_NE(error.find("2 values"), std::string::npos) << error;
  EXPECT_NE(error.find("3 devices"), std::string::npos) << error;
}

TEST(PlannerTest, TensorSplitAllZeroIsAnError) {
  PlanInput in = uniform_input(10, 100, {device("local", 10000), device("w1:1", 10000)});
  in.tensor_split = {0, 0};
  EXPECT_NE(plan_error(in).find("all zeros"), std::string::npos) << plan_error(in);
}

TEST(PlannerTest, TensorSplitOverADeviceNamesItAndTheNumbers) {
  // 9 of 10 layers of 100 MiB on a worker with 500 MiB.
  PlanInput in = uniform_input(10, 100, {device("local", 10000), device("10.0.0.2:50052", 500)});
  in.tensor_split = {1, 9};
  const std::string error = plan_error(in);
  EXPECT_NE(error.find("10.0.0.2:50052"), std::string::npos) << error;
  EXPECT_NE(error.find("needs 900 MiB"), std::string::npos) << error;
  EXPECT_NE(error.find("500 MiB available"), std::string::npos) << error;
}

TEST(PlannerTest, DoesNotFitSaysHowMuchIsMissing) {
  PlanInput in = uniform_input(30, 160, {device("local", 2048), device("10.0.0.2:50052", 2048)});
  const std::string error = plan_error(in);  // 4800 MiB needed, 4096 offered
  EXPECT_NE(error.find("4800 MiB"), std::string::npos) << error;
  EXPECT_NE(error.find("704 MiB missing"), std::string::npos) << error;
  EXPECT_NE(error.find("local: 2048 MiB free"), std::string::npos) << error;
  EXPECT_NE(error.find("10.0.0.2:50052: 2048 MiB free"), std::string::npos) << error;
}

TEST(PlannerTest, PrimaryWithoutRoomForTheHeadIsRefused) {
  PlanInput in = uniform_input(4, 100, {device("local", 100), device("w1:1", 10000)});
  in.primary_bytes = 200 * MiB;
  EXPECT_NE(plan_error(in).find("primary"), std::string::npos) << plan_error(in);
}

TEST(PlannerTest, PredictionCountsWeightsRoundTripsAndHead) {
  // 1 GB of layers on each side at 10 GB/s: 100 ms each. The remote stage
  // adds one round trip (2 ms) and 2 x 1 MB over an assumed 1 GB/s (2 ms).
  // The head: 0.5 GB at 10 GB/s = 50 ms.
  PlanInput in;
  in.layer_bytes.assign(2, 1000000000ull);
  in.activation_bytes = 1000000;
  in.head_bytes = 500000000ull;
  in.devices = {device("local", 4000), device("w1:1", 4000, 10.0, 2.0)};
  const Plan plan = make_plan(in);
  EXPECT_NEAR(plan.stages[0].predicted_ms, 100.0, 1e-9);
  EXPECT_NEAR(plan.stages[1].predicted_ms, 104.0, 1e-9);
  EXPECT_NEAR(plan.predicted_head_ms, 50.0, 1e-9);
  EXPECT_NEAR(plan.predicted_token_ms, 254.0, 1e-9);
  EXPECT_NEAR(plan.predicted_tok_s, 1000.0 / 254.0, 1e-9);
}

TEST(PlannerTest, SpeedSplitLeavesASlowDeviceOneLayer) {
  // Equal memory; the worker reads 10x slower. By memory: 5 / 5. By speed:
  // the worker keeps one layer (it was named), the primary the rest.
  PlanInput in = uniform_input(10, 100, {device("local", 4000, 10.0), device("w1:1", 4000, 1.0, 0.5)});
  const Plan by_memory = make_plan(in);
  EXPECT_EQ(layer_counts(by_memory), (std::vector<int>{5, 5}));
  in.split = SplitPolicy::speed;
  const Plan by_speed = make_plan(in);
  EXPECT_EQ(by_speed.split, SplitPolicy::speed);
  EXPECT_EQ(layer_counts(by_speed), (std::vector<int>{9, 1}));
  EXPECT_NEAR(by_speed.memory_split_token_ms, by_memory.predicted_token_ms, 1e-9);
  EXPECT_LT(by_speed.predicted_token_ms, 0.5 * by_memory.predicted_token_ms);
  // Let go, it holds nothing: its one layer cost more than the primary's read of it.
  in.keep_every_device = false;
  EXPECT_EQ(layer_counts(make_plan(in)), (std::vector<int>{10, 0}));
}

TEST(PlannerTest, SpeedSplitFillsTheFastDeviceOnlyAsFarAsItsMemory) {
  // The fast worker holds 3 layers of 100 MiB at most; the slow primary the rest.
  PlanInput in = uniform_input(10, 100, {device("local", 4000, 1.0), device("w1:1", 350, 10.0, 0.1)});
  in.split = SplitPolicy::speed;
  const Plan plan = make_plan(in);
  EXPECT_EQ(layer_counts(plan), (std::vector<int>{7, 3}));
}

TEST(PlannerTest, EqualDevicesKeepTheMemorySplit) {
  // Speeds 5 % apart (probe noise): no split by speed pays 10 %.
  PlanInput in = uniform_input(12, 100, {device("local", 4000, 10.0), device("w1:1", 4000, 10.5, 0.1),
                                         device("w2:1", 4000, 9.5, 0.1)});
  in.split = SplitPolicy::speed;
  const Plan plan = make_plan(in);
  EXPECT_EQ(plan.split, SplitPolicy::memory);
  EXPECT_EQ(layer_counts(plan), (std::vector<int>{4, 4, 4}));
}

TEST(PlannerTest, RelaysCostWhatTheirHopsCarry) {
  // 2 layers of 1 GB at 10 GB/s, one per device; the worker 2 ms away on
  // an assumed 1 GB/s link; activations 1 MB a token; no head.
  PlanInput in;
  in.layer_bytes.assign(2, 1000000000ull);
  in.activation_bytes = 1000000;
  in.head_bytes = 1;
  in.primary_bytes = 1;
  in.devices = {device("local", 4000), device("w1:1", 4000, 10.0, 2.0)};
  const Plan plan = make_plan(in);
  // Star: one round trip and the state there and back.
  EXPECT_NEAR(predict(plan, in, Relay::shoal_star).stage_ms[1], 100.0 + 2.0 + 2.0, 1e-6);
  // Chain: half a round trip and one way in, the same again home.
  EXPECT_NEAR(predict(plan, in, Relay::shoal_chain).token_ms - predict(plan, in, Relay::shoal_chain).head_ms,
              200.0 + 2 * (1.0 + 1.0), 1e-6);
  // llama.cpp RPC: two round trips, the state both ways and one layer's graph.
  EXPECT_NEAR(predict(plan, in, Relay::llama_rpc).stage_ms[1], 100.0 + 4.0 + 2.0 + kLlamaRpcGraphBytesPerLayer / 1e6,
              1e-6);
  // A prompt of 512: 2 flops a byte read, at the assumed 200 GFLOP/s, and 512 states each way.
  const Prediction p = predict(plan, in, Relay::shoal_star, 512);
  EXPECT_NEAR(p.prefill_ms, 2 * (2.0 * 1e9 * 512 / 200e9 * 1e3) + 2.0 + 2 * 512.0 + p.head_ms, 1e-6);
}

TEST(PlannerTest, PipelinedPromptIsPacedByTheSlowestStage) {
  // Three stages of one layer each, 1 GFLOP a token, at 100 GFLOP/s (10 ms a
  // token each), no network cost: a prompt of 512 takes 3 x 5.12 s stage
  // after stage; in micro-batches of 64 (k = 8) the pipeline fills in
  // 3 x 0.64 s and then finishes one micro-batch per 0.64 s: (3 + 7) x 0.64 s.
  PlanInput in;
  in.layer_bytes.assign(3, 1000);
  in.layer_flops.assign(3, 1e9);
  in.head_bytes = 1;
  in.primary_bytes = 1;
  in.devices = {device("local", 4000), device("w1:1", 4000), device("w2:1", 4000)};
  for (DeviceInfo& d : in.devices) d.matmul_gflops = 100.0, d.link_gbps = 1e9;
  const Plan plan = make_plan(in);
  ASSERT_EQ(layer_counts(plan), (std::vector<int>{1, 1, 1}));
  const Prediction p = predict(plan, in, Relay::shoal_star, 512, 64);
  EXPECT_NEAR(p.prefill_ms - p.head_ms, 3 * 5120.0, 1e-3);
  EXPECT_NEAR(p.pipelined_prefill_ms - p.head_ms, 10 * 640.0, 1e-3);
  EXPECT_EQ(predict(plan, in, Relay::llama_rpc, 512, 64).pipelined_prefill_ms, 0.0);  // not modelled for llama.cpp
  EXPECT_EQ(predict(plan, in, Relay::shoal_star, 512, 0).pipelined_prefill_ms, 0.0);   // -ub 0
  // In batches of 256 (-b 256): each batch pipelined on its own, 4 micro-batches in 6 ticks.
  EXPECT_NEAR(predict(plan, in, Relay::shoal_star, 512, 64, 256).pipelined_prefill_ms - p.head_ms, 2 * 6 * 640.0,
              1e-3);
  // -ub 300: a batch of 512 is not two micro-batches, so the engine does not pipeline it.
  EXPECT_EQ(predict(plan, in, Relay::shoal_star, 512, 300).pipelined_prefill_ms, 0.0);
}

TEST(PlannerTest, FormatShowsEveryDeviceAndItsLayers) {
  PlanInput in = uniform_input(10, 100, {device("local", 2000), device("10.0.0.2:50052", 2000),
                                         device("10.0.0.3:50052", 100)});
  in.reserve_bytes = 200 * MiB;
  const Plan plan = make_plan(in);
  const std::string table = format_plan(plan, in);
  EXPECT_NE(table.find("device"), std::string::npos) << table;
  EXPECT_NE(table.find("free MiB after"), std::string::npos) << table;
  EXPECT_NE(table.find("local"), std::string::npos) << table;
  EXPECT_NE(table.find("10.0.0.2:50052"), std::string::npos) << table;
  EXPECT_NE(table.find("10.0.0.3:50052"), std::string::npos) << table;
  EXPECT_NE(table.find("0-4 (5)"), std::string::npos) << table;
  EXPECT_NE(table.find("5-9 (5)"), std::string::npos) << table;
  EXPECT_NE(table.find("none"), std::string::npos) << table;
  EXPECT_NE(table.find("predicted decode:"), std::string::npos) << table;
  EXPECT_NE(table.find("tok/s"), std::string::npos) << table;
}

TEST(PlanInputTest, Stories260KLayerBytesAreTheSumOfTheLayersTensors) {
  const auto file = gguf::File::open(std::string(SHOAL_TEST_DATA_DIR) + "/models/stories260K.gguf");
  const ModelConfig config = ModelConfig::from_gguf(*file);
  ASSERT_EQ(config.n_layer, 5);
  const PlanInput in = plan_input_for_model(*file, config, 256, 2, 32, KvTypes{});
  ASSERT_EQ(in.layer_bytes.size(), 5u);
  // Counted here through the name table, independently of the planner's scan of "blk.N.".
  const TensorKind kinds[] = {TensorKind::AttnNorm,  TensorKind::AttnQ,     TensorKind::AttnK,
                              TensorKind::AttnV,     TensorKind::AttnOutput, TensorKind::AttnQBias,
                              TensorKind::AttnKBias, TensorKind::AttnVBias, TensorKind::FfnNorm,
                              TensorKind::FfnGate,   TensorKind::FfnUp,     TensorKind::FfnDown};
  for (int l = 0; l < 5; ++l) {
    uint64_t expected = 0;
    for (TensorKind k : kinds)
      if (const gguf::TensorInfo* t = file->find_tensor(tensor_name(k, l))) expected += t->bytes;
    EXPECT_GT(expected, 0u);
    EXPECT_EQ(in.layer_bytes[l], expected) << "layer " << l;
  }
  // The default KV cache is f16: 2 bytes a value, K and V.
  EXPECT_EQ(in.layer_kv_bytes, std::vector<uint64_t>(5, 2ull * 256 * 2 * config.kv_width() * 2));
  // f32 keys and q8_0 values (34 bytes per 32 values, a row padded to whole
  // words as a GPU keeps it: Backend::kv_row_stride) are counted as such.
  const PlanInput mixed = plan_input_for_model(*file, config, 256, 2, 32, KvTypes{DType::F32, DType::Q8_0});
  EXPECT_EQ(mixed.layer_kv_bytes,
            std::vector<uint64_t>(5, 256ull * 2 * (config.kv_width() * 4 + (config.kv_width() / 32 * 34 + 3) / 4 * 4)));
  EXPECT_EQ(in.activation_bytes, static_cast<uint64_t>(config.n_embd) * 4);
  const uint64_t embd = file->tensor(tensor_name(TensorKind::TokenEmbd)).bytes;
  EXPECT_GT(in.primary_bytes, embd + primary_scratch_bytes(config, 2, 32) - 1);
  // The whole model plans onto one roomy device.
  PlanInput roomy = in;
  roomy.devices = {device("local", 1024)};
  const Plan plan = make_plan(roomy);
  EXPECT_EQ(plan.stages[0].layer_end, 5);
}

// A mixture-of-experts layer is planned with all its experts (a decode step
// reads only two of eight, but the stage holds them all), and a windowed
// layer's KV is only its window plus one batch.
// The MTP draft on the primary: a guess reads the block with a mixture's
// routed share of its experts and the shared head; the primary holds the
// whole block, a KV cache and buffers besides (and plans them).
TEST(PlanInputTest, TheMtpDraftIsPricedAndHeldOnThePrimary) {
  const std::string path = testing::random_model_path("random-qwen35moe");
  SHOAL_NEED_FILE(path);
  const auto file = gguf::File::open(path);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  ASSERT_EQ(config.n_nextn, 1);
  double experts = 0, rest = 0;
  uint64_t block = 0;
  const std::string prefix = "blk." + std::to_string(config.n_layer) + ".";
  for (const auto& t : file->tensors()) {
    if (!t.name.starts_with(prefix)) continue;
    block += t.bytes;
    (t.name.find("_exps.") != std::string::npos ? experts : rest) += static_cast<double>(t.bytes);
  }
  EXPECT_GT(experts, 0);
  const MtpDraftCost cost = mtp_draft_cost(*file, config, 256, 2, 32, KvTypes{});
  const double head = static_cast<double>(file->tensor("output.weight").bytes);
  EXPECT_DOUBLE_EQ(cost.read_bytes, rest + experts * config.n_expert_used / config.n_expert + head);
  EXPECT_GT(cost.held_bytes, block);
  const PlanInput plain = plan_input_for_model(*file, config, 256, 2, 32, KvTypes{});
  const PlanInput mtp = plan_input_for_model(*file, config, 256, 2, 32, KvTypes{}, 0, true);
  EXPECT_EQ(mtp.primary_bytes, plain.primary_bytes + cost.held_bytes);
  // A file without the block costs nothing.
  const std::string qwen3 = testing::random_model_path("random-qwen3");
  SHOAL_NEED_FILE(qwen3);
  const auto other = gguf::File::open(qwen3);
  EXPECT_EQ(mtp_draft_cost(*other, ModelConfig::from_gguf(*other), 256, 2, 32, KvTypes{}).held_bytes, 0u);
}

TEST(PlanInputTest, CountsEveryExpertAndWindowedKv) {
  const std::string moe = testing::random_model_path("random-qwen3moe");
  const std::string gemma = testing::random_model_path("random-gemma3");
  SHOAL_NEED_FILE(moe);
  SHOAL_NEED_FILE(gemma);
  {
    const auto file = gguf::File::open(moe);
    const ModelConfig config = ModelConfig::from_gguf(*file);
    const PlanInput in = plan_input_for_model(*file, config, 256, 1, 32, KvTypes{});
    for (int l = 0; l < config.n_layer; ++l) {
      uint64_t experts = 0;
      for (TensorKind k : {TensorKind::FfnGateExps, TensorKind::FfnUpExps, TensorKind::FfnDownExps})
        experts += file->tensor(tensor_name(k, l)).bytes;
      EXPECT_EQ(experts, 3ull * 8 * 128 * 256 * 4);  // 8 experts of 128 x 256, F32
      EXPECT_GT(in.layer_bytes[l], experts);
    }
  }
  const auto file = gguf::File::open(gemma);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  const PlanInput in = plan_input_for_model(*file, config, 256, 1, 32, KvTypes{});
  const uint64_t row = 2ull * config.kv_width() * 2;  // K and V of one position, f16
  for (int l = 0; l < config.n_layer; ++l)
    EXPECT_EQ(in.layer_kv_bytes[l], row * (l == 5 ? 256 : 8 + 32)) << "layer " << l;  // layer 5 is global
}

// The probe times the model's own matrices: every weight matrix of its
// first layers in file order (all of them in a model under 64 MiB), and of
// an expert tensor only the rows a token is routed to.
TEST(ProbeShapeTest, ListsTheFirstLayersMatricesAndTheRoutedExperts) {
  const std::string moe = testing::random_model_path("random-qwen3moe");
  SHOAL_NEED_FILE(moe);
  const auto file = gguf::File::open(moe);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  const ProbeShape shape = probe_shape_for(*file, config);
  std::vector<ProbeMatrix> want;
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (!t.name.starts_with("blk.") || t.shape.size() < 2) continue;
    const bool experts = t.shape.size() == 3;
    want.push_back({t.type, experts ? t.shape[1] * config.n_expert_used : t.n_rows(), t.row_length()});
  }
  ASSERT_GT(config.n_expert_used, 0);
  EXPECT_EQ(shape.matrices, want);
  EXPECT_EQ(shape.type, DType::F32);
  check_probe_shape(shape);
}

TEST(DeviceProbeTest, TimesALayersMatricesAndRefusesWhatItCannotTime) {
  ProbeShape shape{DType::Q4_K, 512, {{DType::Q4_K, 256, 512}, {DType::Q6_K, 512, 256}, {DType::Q8_0, 37, 96}}};
  const DeviceInfo info = probe_local_cpu(1, shape);
  EXPECT_GT(info.matvec_gbps, 0.0);
  EXPECT_GT(info.matmul_gflops, 0.0);
  EXPECT_EQ(info.probe, shape.name());
  EXPECT_NE(info.probe.find("3 layer matrices"), std::string::npos) << info.probe;
  for (const ProbeShape& bad : {ProbeShape{DType::Q4_K, 96, {}},                          // part blocks
                                ProbeShape{DType::Q8_K, 256, {}},                         // not a weight type
                                ProbeShape{DType::Q4_0, 64, {{DType::Q4_0, 0, 64}}},      // no rows
                                ProbeShape{DType::Q4_0, 64, {{DType::Q4_0, 8, 1 << 17}}}, // too wide
                                ProbeShape{DType::Q4_0, 64, std::vector<ProbeMatrix>(513, {DType::Q4_0, 8, 64})}})
    EXPECT_THROW(probe_local_cpu(1, bad), Error) << bad.name();
  // The largest shape a PROBE may ask for (512 matrices of 2^20 rows of
  // 65536 floats) is timed on a bounded sample, quickly.
  const auto t0 = std::chrono::steady_clock::now();
  const DeviceInfo huge = probe_local_cpu(
      1, ProbeShape{DType::F32, kMaxProbeCols, std::vector<ProbeMatrix>(kMaxProbeMatrices, {DType::F32, kMaxProbeRows, kMaxProbeCols})});
  EXPECT_GT(huge.matvec_gbps, 0.0);
  // Many tiny matrices, and many one-row matrices of distinct long rows:
  // bounded copies and random tiles no larger than their matrices.
  const DeviceInfo tiny =
      probe_local_cpu(1, ProbeShape{DType::Q4_0, 32, std::vector<ProbeMatrix>(kMaxProbeMatrices, {DType::Q4_0, 1, 32})});
  EXPECT_GT(tiny.matvec_gbps, 0.0);
  ProbeShape distinct{DType::F32, 1024, {}};
  for (int64_t i = 0; i < static_cast<int64_t>(kMaxProbeMatrices); ++i) distinct.matrices.push_back({DType::F32, 1, kMaxProbeCols - i});
  EXPECT_GT(probe_local_cpu(1, distinct).matvec_gbps, 0.0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST(DeviceProbeTest, ReportsPositiveNumbersQuickly) {
  const auto t0 = std::chrono::steady_clock::now();
  const DeviceInfo info = probe_local_cpu(2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(info.backend, "CPU");
  EXPECT_EQ(info.threads, 2);
  EXPECT_GT(info.total_memory, 0u);
  EXPECT_GT(info.free_memory, 0u);
  EXPECT_LE(info.free_memory, info.total_memory);
  EXPECT_GT(info.matvec_gbps, 0.0);
  EXPECT_GT(info.matmul_gflops, 0.0);
  // A sanity guard against a probe that ran away (a loop, a huge buffer),
  // not a benchmark: the probe aims at a few hundred ms; sanitizer builds
  // run the kernels many times slower, so they get more room.
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(seconds, 30.0);
#else
  EXPECT_LT(seconds, 2.0);
#endif
  RecordProperty("probe_seconds", std::to_string(seconds));
  std::printf("probe: %.0f ms, matvec %.1f GB/s, matmul %.1f GFLOP/s, free %.0f of %.0f MiB\n", seconds * 1e3,
              info.matvec_gbps, info.matmul_gflops, info.free_memory / double(MiB), info.total_memory / double(MiB));
}

// A Gated DeltaNet layer costs a device with recurrent_layer_ms that much
// more a step beyond its bytes (Metal's dispatches), and the speed split
// weighs it: the DeltaNet layers go to the device without that cost.
TEST(PlannerTest, RecurrentLayersCostTheirDispatchesWhereADeviceHasThem) {
  PlanInput in = uniform_input(8, 100, {device("local", 2000, 10.0), device("10.0.0.2:50052", 2000, 10.0)});
  in.layer_recurrent = {true, true, true, true, false, false, false, false};
  const double plain = make_plan(in).predicted_token_ms;
  in.devices[0].recurrent_layer_ms = 10.0;
  EXPECT_NEAR(make_plan(in).predicted_token_ms, plain + 40.0, 1e-9);  // all four on device 0 in the memory split
  in.split = SplitPolicy::speed;
  in.keep_every_device = false;
  in.devices[1].rtt_ms = 0.0;
  const Plan fast = make_plan(in);
  EXPECT_EQ(layer_counts(fast), (std::vector<int>{0, 8}));
  EXPECT_NEAR(fast.predicted_token_ms, plain, 1e-9);
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// Speculative decoding in the cost model: a step checking k guesses costs
// the plain step while the weights' read dominates, so right guesses
// divide the time per token; none right, and no guess pays; the longer the
// round trips a step pays, the more a guess gains.
TEST(SpeculativeCost, GuessesPayWhereStepsAreBoundByReadsAndRoundTrips) {
  PlanInput in = uniform_input(8, 100, {device("local", 4000, 10.0), device("w1:1", 4000, 10.0, 1.0)});
  in.layer_flops.assign(8, 2.0 * 50e6);  // 50 M weights a layer
  for (auto& d : in.devices) d.matmul_gflops = 20.0;  // a row computes in half the time its weights read
  const Plan plan = make_plan(in);
  Speculation s;
  s.draft_max = 8;
  s.acceptance = 0.0;
  EXPECT_EQ(predict_speculative(plan, in, Relay::shoal_star, s).draft, 0);
  s.acceptance = 0.8;
  const SpeculativePrediction near = predict_speculative(plan, in, Relay::shoal_star, s);
  EXPECT_GT(near.draft, 0);
  EXPECT_LT(near.token_ms, near.plain_token_ms);
  EXPECT_NEAR(near.tokens_per_step, (1 - std::pow(0.8, near.draft + 1)) / 0.2, 1e-9);
  // The plain step is the decode prediction's own (reads, overheads, hops and head).
  EXPECT_NEAR(near.plain_token_ms, predict(plan, in, Relay::shoal_star).token_ms, 1e-9);
  // Past the read-bound rows a longer guess costs compute; a long round
  // trip makes it worth that.
  in.devices[1].rtt_ms = 40.0;
  const SpeculativePrediction far = predict_speculative(make_plan(in), in, Relay::shoal_star, s);
  EXPECT_GT(far.draft, near.draft);
  EXPECT_GT(far.plain_token_ms / far.token_ms, near.plain_token_ms / near.token_ms);
  // A draft that costs as much as a step gains nothing.
  s.draft_token_ms = far.plain_token_ms;
  EXPECT_EQ(predict_speculative(make_plan(in), in, Relay::shoal_star, s).draft, 0);
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// Qwen2.5-Coder-0.5B's shape in round numbers: 24 layers of 14 MiB read a
// step, all of it in matrices a group divides, 12 800 values all-gathered
// per layer and token; the head 130 MiB on the primary.
PlanInput tensor_input(double rtt_ms) {
  PlanInput in = uniform_input(24, 14, {device("local", 4096, 20.0), device("a:1", 4096, 20.0, rtt_ms),
                                        device("b:1", 4096, 20.0, rtt_ms)});
  in.layer_split_bytes.assign(24, 14 * MiB);
  in.layer_exchange_values.assign(24, 12800);
  in.head_bytes = 130 * MiB;
  in.activation_bytes = 896 * 4;
  for (DeviceInfo& d : in.devices) d.link_gbps = 1.0;
  return in;
}

TEST(TensorSplitCost, ComputeDividesAndEachAllGatherCostsHalfARoundTrip) {
  const PlanInput in = tensor_input(0.1);
  const TensorGroupPrediction p = predict_tensor_groups(in, {{1, 2}});
  // Each member reads half the layers' bytes at 20 GB/s.
  EXPECT_NEAR(p.compute_ms, 24 * 7 * MiB / 20e9 * 1e3, 1e-9);
  // 96 all-gathers at 0.05 ms, and half of 24 x 12 800 values x 4 bytes in at 1 GB/s.
  EXPECT_NEAR(p.exchange_ms, 96 * 0.05 + 24 * 12800 * 4 / 2 / 1e9 * 1e3, 1e-9);
  EXPECT_NEAR(p.head_ms, 130 * MiB / 20e9 * 1e3, 1e-9);
  EXPECT_NEAR(p.token_ms, p.compute_ms + p.exchange_ms + p.hop_ms + p.head_ms, 1e-12);
  // Four members: half the compute again, more of the values taken in.
  const TensorGroupPrediction four = predict_tensor_groups(
      [&] {
        PlanInput more = in;
        more.devices.push_back(device("c:1", 4096, 20.0, 0.1));
        more.devices.push_back(device("d:1", 4096, 20.0, 0.1));
        for (DeviceInfo& d : more.devices) d.link_gbps = 1.0;
        return more;
      }(),
      {{1, 2, 3, 4}});
  EXPECT_NEAR(four.compute_ms, p.compute_ms / 2, 1e-9);
  EXPECT_GT(four.exchange_ms, p.exchange_ms);
  // Two groups of two: each its half of the layers, one after the other;
  // a group of one is a worker's own stage, with no all-gathers.
  const PlanInput four_workers = [&] {
    PlanInput more = in;
    more.devices.push_back(device("c:1", 4096, 20.0, 0.1));
    more.devices.push_back(device("d:1", 4096, 20.0, 0.1));
    for (DeviceInfo& d : more.devices) d.link_gbps = 1.0;
    return more;
  }();
  const TensorGroupPrediction pairs = predict_tensor_groups(four_workers, {{1, 2}, {3, 4}});
  EXPECT_NEAR(pairs.compute_ms, p.compute_ms, 1e-9);
  EXPECT_NEAR(pairs.exchange_ms, p.exchange_ms, 1e-9);
  EXPECT_GT(pairs.hop_ms, p.hop_ms);
  const TensorGroupPrediction alone = predict_tensor_groups(in, {{1}});
  EXPECT_EQ(alone.exchange_ms, 0.0);
  EXPECT_NEAR(alone.compute_ms, 2 * p.compute_ms, 1e-9);
  EXPECT_EQ(tensor_groups(4, 2), (std::vector<std::vector<int>>{{1, 2}, {3, 4}}));
  EXPECT_EQ(tensor_groups(3, 2), (std::vector<std::vector<int>>{{1, 2}, {3}}));
  EXPECT_EQ(tensor_groups(3, 0), (std::vector<std::vector<int>>{{1, 2, 3}}));
  // With no divided bytes known, nothing is predicted.
  PlanInput unknown = in;
  unknown.layer_split_bytes.clear();
  EXPECT_EQ(predict_tensor_groups(unknown, {{1, 2}}).token_ms, 0.0);
}

// A member three times as fast takes three times the rows, so both finish
// their shares together: the group's step is what the divided bytes cost
// at the two members' speeds added up, not twice the slow member's half.
TEST(TensorSplitCost, SharesFollowTheMembersSpeed) {
  PlanInput in = tensor_input(0.1);
  in.devices[1].matvec_gbps = 60.0;  // a:1 three times b:1's 20
  EXPECT_EQ(tensor_group_weights(in, {{1, 2}}), (std::vector<std::vector<int>>{{20, 7}}));
  const TensorGroupPrediction p = predict_tensor_groups(in, {{1, 2}});
  // b:1 reads 7/27 of the bytes at 20 GB/s; a:1 20/27 at 60: b:1 is the slower, just.
  EXPECT_NEAR(p.compute_ms, 24 * 14 * MiB * 7.0 / 27 / 20e9 * 1e3, 1e-9);
  // Even shares would have left a:1 waiting on b:1's half.
  EXPECT_LT(p.compute_ms, 24 * 7 * MiB / 20e9 * 1e3 * 0.6);
  const SplitChoice c = choose_split(SplitMode::tensor, make_plan(in), in);
  EXPECT_EQ(c.weights, (std::vector<std::vector<int>>{{20, 7}}));
  EXPECT_NE(format_split_choice(c, in).find("a:1 + b:1 (shares 20:7)"), std::string::npos) << format_split_choice(c, in);
  // Within 1.5x of each other the members share evenly (probe noise is that large).
  in.devices[1].matvec_gbps = 28.0;
  EXPECT_EQ(tensor_group_weights(in, {{1, 2}}), (std::vector<std::vector<int>>{{1, 1}}));
  // --tensor-split names the shares (local first; in thousandths; a 0 is weight 1).
  in.tensor_split = {1, 3, 1};
  EXPECT_EQ(tensor_group_weights(in, {{1, 2}}), (std::vector<std::vector<int>>{{1000, 333}}));
  in.tensor_split = {0, 1, 0};
  EXPECT_EQ(tensor_group_weights(in, {{1, 2}}), (std::vector<std::vector<int>>{{1000, 1}}));
  // A member's memory is checked against its own share.
  in.tensor_split = {1, 3, 1};
  in.layer_kv_bytes.assign(24, 0);
  in.devices[1].free_memory = 200 * MiB;  // 1000/1333 of 24 x 14 MiB is 252
  EXPECT_NE(tensor_group_misfit(in, {{1, 2}}).find("a:1 would hold 252 MiB"), std::string::npos)
      << tensor_group_misfit(in, {{1, 2}});
}

// The last group runs the head when it has two members: each reads its
// share of the head, the logits are all-gathered and sent back.
TEST(TensorSplitCost, TheLastGroupRunsTheHead) {
  PlanInput in = tensor_input(0.1);
  const double on_primary = predict_tensor_groups(in, {{1, 2}}).head_ms;
  in.logit_bytes = 151936 * 4;
  const TensorGroupPrediction p = predict_tensor_groups(in, {{1, 2}});
  EXPECT_TRUE(p.head_on_group);
  // Half of 130 MiB at 20 GB/s, half a round trip, the other half of the logits in and all of them out at 1 GB/s.
  EXPECT_NEAR(p.head_ms, 65 * MiB / 20e9 * 1e3 + 0.05 + 151936 * 4 * 1.5 / 1e9 * 1e3, 1e-9);
  EXPECT_LT(p.head_ms, on_primary);
  // A pipeline whose last group is one worker keeps the head on the primary.
  PlanInput three = in;
  three.devices.push_back(device("c:1", 4096, 20.0, 0.1));
  EXPECT_FALSE(predict_tensor_groups(three, {{1, 2}, {3}}).head_on_group);
  // Each member of the last group holds its share of the head.
  in.layer_kv_bytes.assign(24, 0);
  in.devices[2].free_memory = 200 * MiB;  // half of 24 x 14 MiB is 168, and half the head 65 more
  EXPECT_NE(tensor_group_misfit(in, {{1, 2}}).find("b:1 would hold 233 MiB"), std::string::npos)
      << tensor_group_misfit(in, {{1, 2}});
}

// A member holds its KV heads' part of an attention layer's cache, where
// the group divides the heads: Qwen2.5-0.5B's 2 KV heads, one each.
TEST(TensorSplitCost, EachMemberHoldsItsKvHeadsPartOfTheCache) {
  PlanInput in = tensor_input(0.1);
  in.layer_kv_bytes.assign(24, 8 * MiB);
  in.devices[1].free_memory = 320 * MiB;  // half of 24 x 14 MiB is 168; the whole cache 192 more, half of it 96
  EXPECT_NE(tensor_group_misfit(in, {{1, 2}}).find("a:1 would hold 360 MiB"), std::string::npos)
      << tensor_group_misfit(in, {{1, 2}});
  in.attention_heads = {14, 2, 64, 64};
  EXPECT_EQ(tensor_group_misfit(in, {{1, 2}}), "");
  // A DeltaNet layer's state is not divided.
  in.layer_recurrent.assign(24, true);
  EXPECT_NE(tensor_group_misfit(in, {{1, 2}}).find("a:1 would hold 360 MiB"), std::string::npos);
  // Nor is the cache with more members than query heads (attention stays whole).
  in.layer_recurrent.clear();
  in.attention_heads = {1, 1, 64, 64};
  EXPECT_NE(tensor_group_misfit(in, {{1, 2}}).find("a:1 would hold 360 MiB"), std::string::npos);
  // SmolLM2's 9/3 heads: the second member holds 2 of the 3 KV heads, so 6/9 of Q (2 MiB a layer) and
  // 2/3 of K and V (1 MiB), where its share weight gives half: 168 + 24 x (2/3 - 1/2) x 3 = 180 MiB of
  // weights, and 2/3 of the cache, 128 MiB. It reads those bytes a step too.
  in.attention_heads = {9, 3, 64, 64};
  in.layer_q_bytes.assign(24, 2 * MiB);
  in.layer_kv_proj_bytes.assign(24, 1 * MiB);
  in.devices[1].free_memory = 4096 * MiB;
  in.devices[2].free_memory = 300 * MiB;
  EXPECT_NE(tensor_group_misfit(in, {{1, 2}}).find("b:1 would hold 308 MiB"), std::string::npos)
      << tensor_group_misfit(in, {{1, 2}});
  EXPECT_NEAR(predict_tensor_groups(in, {{1, 2}}).compute_ms, 180 * MiB / 20e9 * 1e3, 1e-9);
}

TEST(TensorSplitCost, AutoTakesTheTensorSplitOnFastLinksAndTheLayersOnSlowOnes) {
  for (double rtt : {0.05, 1.0, 5.0}) {
    SCOPED_TRACE(rtt);
    const PlanInput in = tensor_input(rtt);
    const Plan plan = make_plan(in);
    const SplitChoice c = choose_split(SplitMode::automatic, plan, in);
    EXPECT_EQ(c.mode == SplitMode::tensor, c.tensor.token_ms < plan.predicted_token_ms);
    EXPECT_EQ(c.mode, rtt < 1.0 ? SplitMode::tensor : SplitMode::layer) << format_split_choice(c, in);
    EXPECT_NE(format_split_choice(c, in).find(c.mode == SplitMode::tensor ? "split mode: tensor (auto: the tensor"
                                                                            : "split mode: layer (auto: the layer"),
              std::string::npos);
    // Asked for by name, each runs whatever the prediction.
    EXPECT_EQ(choose_split(SplitMode::tensor, plan, in).mode, SplitMode::tensor);
    EXPECT_EQ(choose_split(SplitMode::layer, plan, in).mode, SplitMode::layer);
  }
  // One worker: no group to make.
  PlanInput one = tensor_input(0.05);
  one.devices.pop_back();
  const SplitChoice c = choose_split(SplitMode::tensor, make_plan(one), one);
  EXPECT_EQ(c.mode, SplitMode::layer);
  EXPECT_NE(c.reason.find("needs two machines in a group"), std::string::npos);
  // Members that cannot hold their share (and the whole KV cache): auto
  // keeps the layer split, and says which member and how much.
  PlanInput tight = tensor_input(0.05);
  tight.devices[2].free_memory = 100 * MiB;  // half of 24 x 14 MiB is 168
  tight.layer_kv_bytes.assign(24, 0);
  const SplitChoice refused = choose_split(SplitMode::automatic, make_plan(tight), tight);
  EXPECT_EQ(refused.mode, SplitMode::layer);
  EXPECT_NE(refused.reason.find("the tensor split does not fit: b:1 would hold 168 MiB of layers 0-23 and has"),
            std::string::npos)
      << refused.reason;
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// Two layers of 1 GB, 1 GFLOP a token and 1 MFLOP a (query, position)
// pair, with 1 KB of cache a position, on a fast-computing and a
// fast-reading device 1 GB/s apart.
PlanInput request_input() {
  PlanInput in;
  in.layer_bytes.assign(2, 1000 * MiB);
  in.layer_flops.assign(2, 1e9);
  in.layer_pair_flops.assign(2, 1e6);
  in.layer_window.assign(2, 0);
  in.layer_kv_row_bytes.assign(2, 1000);
  in.layer_state_bytes.assign(2, 0);
  in.head_bytes = in.primary_bytes = 1;
  in.devices = {device("reads", 8000, 100.0), device("computes", 8000, 10.0)};
  in.devices[0].matmul_gflops = 1000.0;
  in.devices[1].matmul_gflops = 10000.0;
  in.devices[1].link_gbps = 1.0;
  return in;
}

TEST(RequestCost, APromptsAttentionGrowsWithItsLengthUpToTheWindow) {
  PlanInput in = request_input();
  in.devices.resize(1);
  const Plan plan = make_plan(in);
  // 2 layers x 1 MFLOP x the pairs rows 0..n-1 see (n(n+1)/2), at 1 TFLOP/s, beside 2 GFLOP a token.
  auto prompt_ms = [&](int n, int batch = 0) {
    const Prediction p = predict(plan, in, Relay::shoal_star, n, 0, batch);
    return p.prefill_ms - p.head_ms;
  };
  EXPECT_NEAR(prompt_ms(1000), 1000 * 2.0 + 2 * 1e6 * (1000.0 * 1001 / 2) / 1e12 * 1e3, 1e-6);
  // Batches see what came before them: two batches of 500 cost what one of 1000 does.
  EXPECT_NEAR(prompt_ms(1000, 500), prompt_ms(1000), 1e-6);
  // A window of 100 caps each row's pairs: 100 x 101 / 2 for the first 100, 100 each after.
  in.layer_window.assign(2, 100);
  EXPECT_NEAR(prompt_ms(1000), 1000 * 2.0 + 2 * 1e6 * (100.0 * 101 / 2 + 900 * 100) / 1e12 * 1e3, 1e-6);
  EXPECT_NEAR(prompt_ms(1000, 300), prompt_ms(1000), 1e-6);
}

TEST(RequestCost, APromptElsewhereMovesItsCacheBehindThePrompt) {
  PlanInput in = request_input();
  in.tensor_split = {1, 0};
  const Plan decode = make_plan(in);  // every layer on the device that reads fast
  in.tensor_split = {0, 1};
  const Plan prompt = make_plan(in);
  in.tensor_split.clear();
  const RequestShape request{1000, 11};
  const RequestPrediction joint = predict_request(decode, decode, in, Relay::shoal_star, request);
  EXPECT_EQ(joint.cache_bytes, 0.0);
  EXPECT_EQ(joint.exposed_ms, 0.0);
  EXPECT_NEAR(joint.total_ms, joint.prefill_ms + 10 * joint.token_ms, 1e-9);
  const RequestPrediction split = predict_request(prompt, decode, in, Relay::shoal_star, request);
  // Each layer's 1000 positions of 1 KB, over the 1 GB/s link: 1 ms a layer, hidden behind the prompt but the last.
  EXPECT_EQ(split.cache_bytes, 2 * 1000 * 1000.0);
  EXPECT_NEAR(split.cache_ms, 2.0, 1e-9);
  EXPECT_NEAR(split.exposed_ms, 1.0, 1e-9);
  EXPECT_LT(split.prefill_ms, joint.prefill_ms / 5);  // ten times the compute, and the rows' trips
  EXPECT_EQ(split.token_ms, joint.token_ms);          // decoded where it was
  // A decode step reads the cache of its context: 2 layers x 1005 positions x 1 KB at 100 GB/s beside 2 GB.
  EXPECT_NEAR(joint.token_ms - predict(decode, in, Relay::shoal_star).token_ms, 2 * 1005 * 1000.0 / 100e9 * 1e3,
              1e-9);
  // A slow link shows: 0.1 MB/s takes 20 s for the cache, most of it after the prompt.
  in.devices[1].link_gbps = 1e-4;
  const RequestPrediction slow = predict_request(prompt, decode, in, Relay::shoal_star, request);
  EXPECT_NEAR(slow.cache_ms, 20000.0, 1e-6);
  EXPECT_NEAR(slow.exposed_ms, 20000.0 - slow.prefill_ms + 10000.0, 1e-6);
}

TEST(RequestCost, PromptsGoWhereTheyWinAndWhereMemoryHoldsBothPlans) {
  PlanInput in = request_input();
  in.tensor_split = {1, 0};
  const Plan decode = make_plan(in);
  in.tensor_split.clear();
  const RequestShape request{4000, 16};
  const PromptPlacement chosen = choose_prompt_placement(decode, in, Relay::shoal_star, request, {});
  ASSERT_TRUE(chosen.split);
  EXPECT_EQ(layer_counts(chosen.plan), (std::vector<int>{0, 2}));
  EXPECT_LT(chosen.placed.total_ms, 0.9 * chosen.joint.total_ms);
  const std::string shown = format_prompt_placement(chosen, decode, in, request);
  EXPECT_NE(shown.find("takes: prompts on computes (layers 0-1), tokens on reads (layers 0-1)"), std::string::npos)
      << shown;
  // A short request gains too little: the joint placement stays.
  EXPECT_FALSE(choose_prompt_placement(decode, in, Relay::shoal_star, {10, 100}, {}).split);
  // The computing device cannot hold the layers beside what it would decode: refused, said why.
  in.devices[1].free_memory = 1500 * MiB;
  const PromptPlacement small = choose_prompt_placement(decode, in, Relay::shoal_star, request, {});
  EXPECT_FALSE(small.split);
  ASSERT_FALSE(small.refused.empty());
  EXPECT_NE(format_prompt_placement(small, decode, in, request).find("computes"), std::string::npos);
  // Forced (--prefill-on) where it does not fit: an error naming the device.
  try {
    choose_prompt_placement(decode, in, Relay::shoal_star, request, {1});
    FAIL() << "a prompt plan over memory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("computes"), std::string::npos) << e.what();
  }
  // Forced where it fits: taken even where it loses.
  in.devices[1].free_memory = 8000 * MiB;
  EXPECT_TRUE(choose_prompt_placement(decode, in, Relay::shoal_star, {10, 100}, {1}).split);
}

}  // namespace
}  // namespace shoal
