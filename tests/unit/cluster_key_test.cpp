// The cluster key's rules (wire/cluster_key.h): only 64 hex characters of
// random-looking bytes, or a passphrase stretched with Argon2id.
#include "cluster/wire/cluster_key.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "temp_dir.h"
#include "util/error.h"

namespace shoal::wire {
namespace {

// No key from the environment of whoever runs the tests.
struct CleanEnv {
  CleanEnv() {
    ::unsetenv("SHOAL_CLUSTER_KEY");
    ::unsetenv("SHOAL_CLUSTER_PASSPHRASE");
  }
  ~CleanEnv() {
    ::unsetenv("SHOAL_CLUSTER_KEY");
    ::unsetenv("SHOAL_CLUSTER_PASSPHRASE");
  }
};

std::string write_file(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  ::chmod(path.c_str(), 0600);  // as keygen makes them: no warning
  return path;
}

// The message of the shoal::Error that f throws, or "" when it throws none.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string load_file(const std::string& text) {
  testing::TempDir dir;
  return *load_cluster_key(write_file(dir, "cluster.key", text));
}

TEST(ClusterKey, KeygenKeyIsAcceptedAsWritten) {
  CleanEnv env;
  const std::string key = generate_cluster_key();
  ASSERT_EQ(key.size(), 64u);
  EXPECT_EQ(load_file(key + "\n"), key);
  EXPECT_EQ(load_file(key + "\r\n"), key);
  EXPECT_EQ(load_file(key), key);
  EXPECT_NE(generate_cluster_key(), key);
}

TEST(ClusterKey, UpperCaseHexIsTheSameKey) {
  CleanEnv env;
  const std::string key = generate_cluster_key();
  std::string upper = key;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  EXPECT_EQ(load_file(upper), key);
}

TEST(ClusterKey, SixteenByteKeyIsRefusedWithTheWayToMakeOne) {
  CleanEnv env;
  const std::string message = error_of([] { load_file("0123456789abcdef\n"); });
  EXPECT_NE(message.find("shoal keygen"), std::string::npos) << message;
  EXPECT_NE(message.find("passphrase"), std::string::npos) << message;
  EXPECT_EQ(message.find("0123456789abcdef"), std::string::npos) << "the key leaked into: " << message;
}

TEST(ClusterKey, PasswordAndNonHexAreRefused) {
  CleanEnv env;
  EXPECT_NE(error_of([] { load_file("hunter2hunter2hunter2\n"); }).find("shoal keygen"), std::string::npos);
  EXPECT_NE(error_of([] { load_file(std::string(63, 'a') + "g"); }).find("not hexadecimal"), std::string::npos);
  EXPECT_NE(error_of([] { load_file(generate_cluster_key() + "00"); }).find("shoal keygen"), std::string::npos);
}

TEST(ClusterKey, LowEntropyHexIsRefused) {
  CleanEnv env;
  std::string counting, beef;
  for (int i = 0; i < 4; ++i) counting += "0123456789abcdef";
  for (int i = 0; i < 8; ++i) beef += "deadbeef";
  for (const std::string& weak : {std::string(64, '0'), std::string(64, 'f'), counting, beef}) {
    const std::string message = error_of([&] { load_file(weak); });
    EXPECT_NE(message.find("repeat a pattern"), std::string::npos) << weak << ": " << message;
    EXPECT_NE(message.find("shoal keygen"), std::string::npos) << message;
  }
}

TEST(ClusterKey, EnvironmentKeyFollowsTheSameRules) {
  CleanEnv env;
  ::setenv("SHOAL_CLUSTER_KEY", "a-sixteen-byte-k", 1);
  EXPECT_NE(error_of([] { load_cluster_key(""); }).find("SHOAL_CLUSTER_KEY"), std::string::npos);
  const std::string key = generate_cluster_key();
  ::setenv("SHOAL_CLUSTER_KEY", key.c_str(), 1);
  EXPECT_EQ(*load_cluster_key(""), key);
  ::setenv("SHOAL_CLUSTER_PASSPHRASE", "a long enough passphrase", 1);
  EXPECT_NE(error_of([] { load_cluster_key(""); }).find("both set"), std::string::npos);
}

TEST(ClusterKey, NoSourceIsNoKey) {
  CleanEnv env;
  EXPECT_FALSE(load_cluster_key("").has_value());
  EXPECT_FALSE(load_cluster_key("", "").has_value());
}

TEST(ClusterKey, PassphraseDerivesOneKeyPerPassphrase) {
  CleanEnv env;
  const std::string a = derive_cluster_key("correct horse battery staple");
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(derive_cluster_key("correct horse battery staple"), a);
  EXPECT_NE(derive_cluster_key("correct horse battery stapler"), a);
  // Pinned: new parameters or salt would split every cluster in two. Worked
  // out with Debian's libargon2 through ctypes, apart from this code.
  EXPECT_EQ(a, "0ccf8544467fd99bbcf0268cebcd70d6ccb914b4c336667df86543fa129ff946");
  // The passphrase's key is a key like any other: the file form loads it.
  EXPECT_EQ(load_file(a), a);
}

TEST(ClusterKey, PassphraseFileAndEnvironmentGiveTheSameKey) {
  CleanEnv env;
  testing::TempDir dir;
  const std::string expected = derive_cluster_key("correct horse battery staple");
  EXPECT_EQ(*load_cluster_key("", write_file(dir, "pass", "correct horse battery staple\n")), expected);
  ::setenv("SHOAL_CLUSTER_PASSPHRASE", "correct horse battery staple", 1);
  EXPECT_EQ(*load_cluster_key("", ""), expected);
}

TEST(ClusterKey, ShortPassphraseIsRefused) {
  CleanEnv env;
  const std::string message = error_of([] { derive_cluster_key("hunter2"); });
  EXPECT_NE(message.find("at least 12"), std::string::npos) << message;
  testing::TempDir dir;
  EXPECT_NE(error_of([&] { load_cluster_key("", write_file(dir, "pass", "short\n")); }).find("at least 12"),
            std::string::npos);
}

TEST(ClusterKey, KeyFileAndPassphraseFileTogetherAreRefused) {
  CleanEnv env;
  testing::TempDir dir;
  const std::string key = write_file(dir, "key", generate_cluster_key());
  const std::string pass = write_file(dir, "pass", "correct horse battery staple");
  EXPECT_NE(error_of([&] { load_cluster_key(key, pass); }).find("pass one"), std::string::npos);
}

TEST(ClusterKey, MissingFileSaysSo) {
  CleanEnv env;
  EXPECT_NE(error_of([] { load_cluster_key("/nonexistent/cluster.key"); }).find("cannot read key file"),
            std::string::npos);
}

}  // namespace
}  // namespace shoal::wire
