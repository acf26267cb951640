#pragma once
// A fresh directory for one test, removed with everything in it at the end.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace shoal::testing {

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "shoal") {
    std::string tmpl = ::testing::TempDir() + prefix + "-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace shoal::testing
