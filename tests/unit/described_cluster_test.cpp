// `shoal plan --cluster` files: catalogue names and explicit numbers become
// the planner's devices; every mistake is named with its file, device and key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "cluster/primary/described_cluster.h"
#include "util/error.h"

namespace shoal {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string error_of(const std::string& text) {
  try {
    parse_described_cluster(text, "c.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DescribedCluster, CatalogueNamesAndExplicitNumbersBecomeDevices) {
  const auto devices = parse_described_cluster(R"(
[[device]]
name = "studio"
catalogue = "m2-ultra-192g"

[[device]]
name = "spark"
catalogue = "dgx-spark"
reserve_gb = 8
link = { gbit = 10, rtt_ms = 0.15 }

[[device]]
name = "custom"
memory_gb = 16
bandwidth_gbps = 50
decode_efficiency = 0.5
link = { gbit = 1, rtt_ms = 2 }
)",
                                               "c.toml");
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].address, "studio");
  EXPECT_EQ(devices[0].free_memory, static_cast<uint64_t>((192 - 4) * kGiB));  // 4 GiB kept for the OS
  EXPECT_NEAR(devices[0].matvec_gbps, 800 * 0.45, 1e-9);
  EXPECT_EQ(devices[0].rtt_ms, 0.0);
  EXPECT_EQ(devices[1].free_memory, static_cast<uint64_t>((128 - 8) * kGiB));
  EXPECT_NEAR(devices[1].matvec_gbps, 273 * 0.80, 1e-9);
  EXPECT_NEAR(devices[1].link_gbps, 10 / 8.0, 1e-12);  // GB/s, as the planner counts
  EXPECT_EQ(devices[1].rtt_ms, 0.15);
  EXPECT_NEAR(devices[2].matvec_gbps, 25.0, 1e-9);
  EXPECT_EQ(devices[2].total_memory, static_cast<uint64_t>(16 * kGiB));
}

TEST(DescribedCluster, MistakesAreNamed) {
  EXPECT_NE(error_of("[[device]\nname = 1").find("c.toml: not valid TOML"), std::string::npos);
  EXPECT_NE(error_of("title = \"x\"").find("no [[device]] tables"), std::string::npos);
  const std::string unknown = error_of("[[device]]\nname = \"a\"\ncatalogue = \"m9-ultra\"");
  EXPECT_NE(unknown.find("device 'a': 'm9-ultra' is not in the catalogue (known: "), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("dgx-spark"), std::string::npos);
  EXPECT_NE(error_of("[[device]]\nname = \"a\"\nmemory_gb = 8\nbandwidth_gbps = 10").find("needs 'decode_efficiency'"),
            std::string::npos);
  EXPECT_NE(error_of("[[device]]\ncatalogue = \"dgx-spark\"\n[[device]]\nname = \"b\"\ncatalogue = \"dgx-spark\"")
                .find("device 'b': needs a link to the primary"),
            std::string::npos);
  EXPECT_NE(error_of("[[device]]\ncatalogue = \"dgx-spark\"\ndecode_efficiency = 3").find("outside 0.01..1"),
            std::string::npos);
  EXPECT_NE(error_of("[[device]]\ncatalogue = \"dgx-spark\"\nmemory_gb = \"lots\"").find("'memory_gb' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of("[[device]]\ncatalogue = \"dgx-spark\"\nlink = { gbit = 1, rtt_ms = 1 }").find("has no link"),
            std::string::npos);
}

TEST(DescribedCluster, EveryExampleAndCatalogueEntryLoads) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(SHOAL_SOURCE_DIR) + "/examples/clusters")) {
    SCOPED_TRACE(entry.path().string());
    EXPECT_GE(load_described_cluster(entry.path().string()).size(), 2u);
    ++n;
  }
  EXPECT_GE(n, 4);
  const auto entries = catalogue_entries();
  EXPECT_GE(entries.size(), 10u);
  for (const auto& e : entries) EXPECT_EQ(e.find("(0 GB"), std::string::npos) << e;
}

}  // namespace
}  // namespace shoal
