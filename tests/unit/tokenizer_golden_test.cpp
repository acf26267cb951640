// Prompt tokens of the golden reference runs (llama.cpp on the same GGUF
// files): BOS where the metadata asks for it, special tokens parsed. The
// kept goldens use the tiny models in tests/data/models; the repository's
// tests/golden use real models from $SHOAL_MODELS_DIR (skipped when absent).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"
#include "test_files.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() { return testing::models_dir(); }

// Checks every golden file in `dir` whose model is in `model_dir`; returns
// how many it checked.
int check_goldens(const fs::path& dir, const fs::path& model_dir) {
  int checked = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const nlohmann::json golden = nlohmann::json::parse(in);
    const fs::path model = model_dir / golden.at("model").get<std::string>();
    if (!fs::exists(model)) continue;
    SCOPED_TRACE(entry.path().filename().string());
    auto file = gguf::File::open(model.string());
    auto tok = Tokenizer::from_gguf(*file);
    const auto prompt = golden.at("prompt").get<std::string>();
    const auto expected = golden.at("prompt_tokens").get<std::vector<TokenId>>();
    EXPECT_EQ(tok->encode(prompt, true, true), expected);
    // Generated pieces as the reference printed them (special tokens rendered).
    for (const auto& step : golden.at("steps")) {
      const auto id = step.at("token").get<TokenId>();
      EXPECT_EQ(tok->token_to_piece(id, true), step.at("piece").get<std::string>()) << "token " << id;
    }
    ++checked;
  }
  return checked;
}

TEST(TokenizerGolden, TinyModelPromptsMatchReference) {
  const fs::path data = fs::path(testing::test_data_dir());
  ASSERT_TRUE(fs::exists(data / "golden")) << data / "golden" << " is missing from the repository";
  EXPECT_EQ(check_goldens(data / "golden", data / "models"), 4) << "a golden file of tests/data lacks its model";
}

TEST(TokenizerGolden, RealModelPromptsMatchReference) {
  const int checked = check_goldens(fs::path(testing::source_dir()) / "tests/golden", models_dir());
  if (checked == 0 && std::getenv("SHOAL_REQUIRE_MODELS")) FAIL() << "no model of tests/golden in " << models_dir();
  if (checked == 0) GTEST_SKIP() << "no model of tests/golden in " << models_dir() << " (set SHOAL_MODELS_DIR)";
}

}  // namespace
}  // namespace shoal
