// Prompt tokens of the golden reference runs (llama.cpp on the same GGUF
// files): BOS where the metadata asks for it, special tokens parsed. The
// shared goldens use the tiny models in ../shared/models; the repository's
// tests/golden use real models from $SHOAL_MODELS_DIR (skipped when absent).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() {
  if (const char* dir = std::getenv("SHOAL_MODELS_DIR")) return dir;
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "") / ".cache/shoal/models";
}

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
  const fs::path shared = fs::path(SHOAL_SHARED_DIR);
  if (!fs::exists(shared / "golden")) GTEST_SKIP() << shared / "golden" << " is absent";
  EXPECT_GT(check_goldens(shared / "golden", shared / "models"), 0) << "no golden file had its model";
}

TEST(TokenizerGolden, RealModelPromptsMatchReference) {
  const int checked = check_goldens(fs::path(SHOAL_SOURCE_DIR) / "tests/golden", models_dir());
  if (checked == 0) GTEST_SKIP() << "no model of tests/golden in " << models_dir() << " (set SHOAL_MODELS_DIR)";
}

}  // namespace
}  // namespace shoal
