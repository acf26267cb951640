#pragma once
// Helpers shared by the model-level tests: where the test data is, golden
// file loading, and running a model to logits.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/vulkan/vulkan_devices.h"
#include "engine/engine.h"
#include "test_files.h"

namespace shoal::testing {

// The random-weight model of every architecture beyond llama/qwen2 that is
// there; under SHOAL_REQUIRE_MODELS (scripts/test made them) a missing one
// is a test failure.
inline std::vector<std::string> random_model_paths() {
  std::vector<std::string> out;
  for (const char* name : {"random-qwen3", "random-gemma3", "random-qwen3moe", "random-mixtral", "random-llama3",
                           "random-qwen35", "random-qwen35moe", "random-qwen3-yarn",
                           "random-gpt-oss", "random-gpt-oss-mxfp4", "random-deepseek2", "random-qwen3next",
                           "random-glm4moe", "random-minimax-m2"}) {
    if (file_exists(random_model_path(name))) out.push_back(random_model_path(name));
    else if (std::getenv("SHOAL_REQUIRE_MODELS")) ADD_FAILURE() << "missing " << random_model_path(name);
  }
  return out;
}

// Whether the Vulkan tests run: when a device is there, and always under
// SHOAL_REQUIRE_MODELS (scripts/test installed lavapipe, so a missing device
// is a failure there, not a skip).
inline bool vulkan_tests_run() {
  std::string why;
  return !list_vulkan_devices(&why).empty() || std::getenv("SHOAL_REQUIRE_MODELS");
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline std::unique_ptr<Engine> load_engine(const std::string& path, int threads = 2, int n_batch = 64, int n_seq = 1,
                                           int n_ctx = 512, KvTypes kv_types = {}, const std::string& device = "cpu") {
  EngineOptions o;
  o.device = device;
  o.kv_types = kv_types;
  o.model_path = path;
  o.threads = threads;
  o.n_batch = n_batch;
  o.n_seq = n_seq;
  o.n_ctx = n_ctx;
  return std::make_unique<Engine>(o);
}

// Logits after each token of `tokens`, fed in chunks of `chunk` tokens with
// logits requested for every row.
inline std::vector<float> all_logits(Engine& e, const std::vector<TokenId>& tokens, int chunk, int seq = 0) {
  const int n_vocab = e.config().n_vocab;
  std::vector<float> out;
  Batch b;
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    b.clear();
    for (size_t j = i; j < std::min(tokens.size(), i + chunk); ++j) b.add(tokens[j], static_cast<int>(j), seq, true);
    const float* l = e.pipeline().forward(b);
    out.insert(out.end(), l, l + static_cast<size_t>(b.size()) * n_vocab);
  }
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace shoal::testing
