// ModelConfig on the wire (LOAD_STAGE): every architecture's config comes
// back the same, and a hostile one is refused before it sizes anything.
#include <gtest/gtest.h>

#include <climits>

#include "cluster/wire/model_config_json.h"
#include "cluster/wire/protocol.h"
#include "gguf/reader.h"
#include "model_test_support.h"

namespace shoal::testing {
namespace {

std::vector<std::string> model_files() {
  std::vector<std::string> out = {test_data_dir() + "/models/stories260K.gguf"};
  for (const std::string& path : random_model_paths()) out.push_back(path);
  return out;
}

TEST(ModelConfigWire, EveryArchitectureRoundTrips) {
  for (const std::string& path : model_files()) {
    SCOPED_TRACE(path);
    const ModelConfig c = ModelConfig::from_gguf(*gguf::File::open(path));
    const nlohmann::json j = wire::config_to_json(c);
    EXPECT_EQ(wire::config_to_json(wire::config_from_json(j)), j);
  }
}

// The code and message of the ProtocolError that config_from_json throws.
std::pair<wire::ErrorCode, std::string> refusal(const nlohmann::json& j) {
  try {
    wire::config_from_json(j);
  } catch (const wire::ProtocolError& e) {
    return {e.code(), e.what()};
  }
  ADD_FAILURE() << "accepted " << j.dump();
  return {};
}

TEST(ModelConfigWire, HostileConfigsAreRefused) {
  const std::string gemma = random_model_path("random-gemma3");
  SHOAL_NEED_FILE(gemma);
  const nlohmann::json good = wire::config_to_json(ModelConfig::from_gguf(*gguf::File::open(gemma)));

  nlohmann::json j = good;
  j["layers"][0][0] = INT_MAX;  // a window that would overflow the ring size
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);

  j = good;
  j["layers"].erase(j["layers"].begin());  // one layer's settings missing
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);

  j = good;
  j["n_ff_exp"] = 1 << 20;  // expert width without experts: would inflate the scratch
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);

  j = good;
  j["layer_tensors"].push_back("attn_kv_b.weight");  // a block this worker cannot compute (MLA's unsplit K/V)
  const auto [code, message] = refusal(j);
  EXPECT_EQ(code, wire::ErrorCode::BadRequest);
  EXPECT_NE(message.find("attn_kv_b.weight"), std::string::npos) << message;

  j = good;
  j["layer_tensors"].push_back("attn_kv_a_mqa.weight");  // latent attention's tensor in an ordinary layer
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);

  j = good;
  j["expert_gating"] = "sqrt_softplus";  // a router this worker does not compute
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::BadRequest);

  j = good;
  j["layer_tensors"].push_back("attn_norm.weight");  // twice
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);

  j = good;
  j["activation"] = "relu";
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::BadRequest);

  j = good;
  j["layers"][0][3] = "mamba";  // a layer kind this worker cannot compute
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::BadRequest);

  j = good;
  j["layers"][0][3] = "delta_net";  // a DeltaNet layer without its tensors and sizes
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);
}

TEST(ModelConfigWire, HostileDeltaNetSizesAreRefused) {
  const std::string qwen35 = random_model_path("random-qwen35");
  SHOAL_NEED_FILE(qwen35);
  const nlohmann::json good = wire::config_to_json(ModelConfig::from_gguf(*gguf::File::open(qwen35)));
  for (const nlohmann::json& delta : {nlohmann::json{4, 1 << 20, 2, 4}, nlohmann::json{4, 32, 3, 4},
                                      nlohmann::json{1, 32, 2, 4}, nlohmann::json{4, 32, 0, 4}}) {
    nlohmann::json j = good;
    j["delta_net"] = delta;  // a state that would inflate the memory, or heads that do not share evenly
    EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed) << delta.dump();
  }
  nlohmann::json j = good;
  j["recurrent_tensors"].erase(j["recurrent_tensors"].begin() + 3);  // no convolution
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);
}

TEST(ModelConfigWire, HostileLatentAttentionIsRefused) {
  const std::string deepseek = random_model_path("random-deepseek2");
  SHOAL_NEED_FILE(deepseek);
  const nlohmann::json good = wire::config_to_json(ModelConfig::from_gguf(*gguf::File::open(deepseek)));
  EXPECT_EQ(wire::config_from_json(good).mla, ModelConfig::from_gguf(*gguf::File::open(deepseek)).mla);
  // A latent that is not the cached row less its rope part; one that would
  // inflate the scratch; a query rank without the low-rank pair's tensors.
  for (const nlohmann::json& mla : {nlohmann::json{96, 120, 64, 64}, nlohmann::json{96, 128, 1 << 20, 64},
                                    nlohmann::json{0, 128, 64, 64}}) {
    nlohmann::json j = good;
    j["latent_attention"] = mla;
    EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed) << mla.dump();
  }
  nlohmann::json j = good;
  j["n_dense_lead"] = 0;  // leading tensors without leading layers
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);
  j = good;
  j["n_expert_groups"] = 3;  // 8 experts do not split into 3 groups
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);
  j = good;
  j["lead_tensors"].erase(j["lead_tensors"].end() - 1);  // a dense FFN without its down projection
  EXPECT_EQ(refusal(j).first, wire::ErrorCode::Malformed);
}

}  // namespace
}  // namespace shoal::testing
