#pragma once
// Where tests find their files, and what a missing one means. The files of
// tests/data are part of the repository: missing, they fail the test. A
// fetched or made model is skipped when absent, unless scripts/test fetched
// and made them all (SHOAL_REQUIRE_MODELS), where a missing one fails too.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace shoal::testing {

// Where the build put them, unless the environment says otherwise (a build
// carried to another machine: scripts/device-check).
inline std::string test_data_dir() {
  const char* d = std::getenv("SHOAL_TEST_DATA_DIR");
  return d ? d : SHOAL_TEST_DATA_DIR;
}
inline std::string source_dir() {
  const char* d = std::getenv("SHOAL_SOURCE_DIR");
  return d ? d : SHOAL_SOURCE_DIR;
}

// Where scripts/fetch-models puts models (the same default and override).
inline std::string models_dir() {
  if (const char* d = std::getenv("SHOAL_MODELS_DIR"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/shoal/models";
}

// Where tests/models/make_random_models.py puts the random-weight model `name`.
inline std::string random_model_path(const std::string& name) { return models_dir() + "/random/" + name + ".gguf"; }

inline bool file_exists(const std::string& path) { return std::filesystem::exists(path); }

inline bool must_exist(const std::string& path) {
  return path.starts_with(test_data_dir()) || std::getenv("SHOAL_REQUIRE_MODELS") != nullptr;
}

}  // namespace shoal::testing

// Ends the test when `path` is absent: a failure where the file must be
// there, a skip otherwise.
#define SHOAL_NEED_FILE(path)                                                                            \
  do {                                                                                                   \
    const std::string shoal_needed_ = (path);                                                            \
    if (!::shoal::testing::file_exists(shoal_needed_)) {                                                 \
      if (::shoal::testing::must_exist(shoal_needed_))                                                   \
        FAIL() << shoal_needed_ << " is missing (tests/data is in the repository; scripts/test fetches " \
               << "and makes every other model)";                                                        \
      GTEST_SKIP() << shoal_needed_ << " is absent (scripts/fetch-models, "                              \
                   << "tests/models/make_random_models.py, or set SHOAL_MODELS_DIR)";                    \
    }                                                                                                    \
  } while (0)
