// `shoal plan --cluster` files: catalogue names and explicit numbers become
// the planner's devices; every mistake is named with its file, device and key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "cluster/primary/described_cluster.h"
#include "cluster/primary/model_catalogue.h"
#include "util/error.h"
#include "util/printable.h"

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
  EXPECT_NEAR(devices[0].matvec_gbps, 800 * 0.860, 1e-9);
  EXPECT_NEAR(devices[0].step_overhead_ms, 5.15, 1e-9);
  EXPECT_NEAR(devices[0].recurrent_layer_ms, 0.198, 1e-12);
  EXPECT_EQ(devices[1].recurrent_layer_ms, 0.0);  // no published hybrid on it shows one
  EXPECT_NEAR(devices[0].matmul_gflops, 16700, 1e-6);
  EXPECT_EQ(devices[0].rtt_ms, 0.0);
  EXPECT_EQ(devices[1].free_memory, static_cast<uint64_t>((128 - 8) * kGiB));
  EXPECT_NEAR(devices[1].matvec_gbps, 273 * 0.874, 1e-9);
  EXPECT_NEAR(devices[1].step_overhead_ms, 1.79, 1e-9);
  EXPECT_NEAR(devices[1].link_gbps, 10 / 8.0, 1e-12);  // GB/s, as the planner counts
  EXPECT_EQ(devices[1].rtt_ms, 0.15);
  EXPECT_NEAR(devices[2].matvec_gbps, 25.0, 1e-9);
  EXPECT_EQ(devices[2].total_memory, static_cast<uint64_t>(16 * kGiB));
}

TEST(DescribedCluster, MistakesAreNamed) {
  EXPECT_NE(error_of("[[device]\nname = 1").find("c.toml: not valid TOML"), std::string::npos);
  EXPECT_NE(error_of("# nothing yet\n").find("no [[device]] tables"), std::string::npos);
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
  EXPECT_NE(error_of("[[device]]\ncatalogue = 5").find("'catalogue' must be a name in quotes"), std::string::npos);
}

TEST(DescribedCluster, AnUnknownKeyIsNamedWithItsTableAndLine) {
  const std::string device = error_of("[[device]]\nname = \"a\"\ncatalogue = \"dgx-spark\"\nmemroy_gb = 64\n");
  EXPECT_NE(device.find("c.toml: device 'a': unknown key 'memroy_gb' in [[device]] 1 (line 4) (known: name, "),
            std::string::npos)
      << device;
  const std::string link = error_of(
      "[[device]]\ncatalogue = \"dgx-spark\"\n[[device]]\nname = \"b\"\ncatalogue = \"dgx-spark\"\n"
      "link = { gbit = 10, rtt = 0.2 }\n");
  EXPECT_NE(link.find("device 'b': unknown key 'rtt' in link (line 6) (known: gbit, rtt_ms)"), std::string::npos)
      << link;
  const std::string top = error_of("[[devices]]\nname = \"a\"\ncatalogue = \"dgx-spark\"\n");
  EXPECT_NE(top.find("c.toml: unknown key 'devices' at the top level (line 1) (known: device)"), std::string::npos)
      << top;
  // A catalogue entry copied into the file as it is still loads.
  EXPECT_EQ(parse_described_cluster("[[device]]\nname = \"x\"\nlabel = \"X\"\nsources = [\"s\"]\nmemory_gb = 8\n"
                                    "bandwidth_gbps = 10\ndecode_efficiency = 0.5\n",
                                    "c.toml")
                .size(),
            1u);
}

TEST(DescribedCluster, ANameMustBePrintableText) {
  for (const char* name : {"name = 7", "name = true", "name = [\"a\"]", "name = { x = 1 }"}) {
    const std::string e = error_of(fmt::format("[[device]]\ncatalogue = \"dgx-spark\"\n{}\n", name));
    EXPECT_NE(e.find("c.toml: device 1: 'name' must be text in quotes, e.g. name = \"spark\" (line 3)"),
              std::string::npos)
        << name << ": " << e;
  }
  EXPECT_NE(error_of("[[device]]\nname = \"\"\ncatalogue = \"dgx-spark\"").find("'name' is empty"), std::string::npos);
  // An escape sequence spelt in TOML's own escapes: refused, and the message
  // shows it escaped, never raw.
  const std::string e = error_of("[[device]]\nname = \"a\\u001b[31mred\"\ncatalogue = \"dgx-spark\"");
  EXPECT_NE(e.find("'name' = \"a\\x1b[31mred\" holds a control character (line 2)"), std::string::npos) << e;
  EXPECT_EQ(e.find('\x1b'), std::string::npos);
  const std::string c1 = error_of("[[device]]\nname = \"a\\u009b2J\"\ncatalogue = \"dgx-spark\"");
  EXPECT_NE(c1.find("holds a control character"), std::string::npos) << c1;
  // A catalogue name is echoed escaped.
  const std::string cat = error_of("[[device]]\ncatalogue = \"\\u001b]0;owned\\u0007\"");
  EXPECT_NE(cat.find("'\\x1b]0;owned\\x07' is not in the catalogue"), std::string::npos) << cat;
}

TEST(DescribedCluster, CutUtf8IsRefusedAsToml) {
  const std::string e = error_of("[[device]]\nname = \"caf\xC3\"\ncatalogue = \"dgx-spark\"\n");
  EXPECT_NE(e.find("c.toml: not valid TOML"), std::string::npos) << e;
}

TEST(DescribedPrintable, ControlsAreEscapedAndBadUtf8Replaced) {
  EXPECT_EQ(printable("plain caf\xC3\xA9 \xE2\x9C\x93"), "plain caf\xC3\xA9 \xE2\x9C\x93");
  EXPECT_EQ(printable("a\x1b[2Jb\x7f"), "a\\x1b[2Jb\\x7f");
  EXPECT_EQ(printable("\xC2\x9B"), "\\u009b");                     // C1 CSI
  EXPECT_EQ(printable("cut \xC3"), "cut \xEF\xBF\xBD");             // a sequence cut short
  EXPECT_EQ(printable("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");     // overlong '/'
  EXPECT_EQ(printable("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(printable("line\n\tnext"), "line\\x0a\\x09next");
  EXPECT_EQ(printable("line\n\tnext", true), "line\n\tnext");
  EXPECT_TRUE(is_printable("d\xC3\xA9j\xC3\xA0 vu"));
  EXPECT_FALSE(is_printable("a\rb"));
}

TEST(DescribedCluster, EveryExampleAndCatalogueEntryLoads) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(SHOAL_SOURCE_DIR) + "/examples/clusters")) {
    SCOPED_TRACE(entry.path().string());
    EXPECT_GE(load_described_cluster(entry.path().string()).size(), 2u);
    ++n;
  }
  EXPECT_GE(n, 4);
  // Every catalogue device as a one-device cluster, read through the
  // embedded copy: memory, speed and a source for each.
  const toml::table devices = toml::parse_file(std::string(SHOAL_SOURCE_DIR) + "/data/devices.toml");
  EXPECT_GE(devices.size(), 10u);
  for (auto&& [name, node] : devices) {
    SCOPED_TRACE(std::string(name.str()));
    EXPECT_TRUE(node.as_table()->contains("sources"));
    const auto d = parse_described_cluster(fmt::format("[[device]]\ncatalogue = \"{}\"\n", name.str()), "test");
    ASSERT_EQ(d.size(), 1u);
    EXPECT_GT(d[0].free_memory, 0u);
    EXPECT_GT(d[0].matvec_gbps, 0.0);
  }
}

TEST(ModelCatalogue, EveryModelAndQuantisationGivesAPlanInput) {
  const toml::table models = toml::parse_file(std::string(SHOAL_SOURCE_DIR) + "/data/models.toml");
  int n = 0;
  for (auto&& [name, node] : models) {
    if (name.str() == "quant") continue;
    SCOPED_TRACE(std::string(name.str()));
    EXPECT_TRUE(node.as_table()->contains("source"));
    for (auto&& [quant, bits] : *models["quant"].as_table()) {
      const auto m = find_catalogue_model(fmt::format("{}:{}", name.str(), quant.str()));
      ASSERT_TRUE(m.has_value());
      const PlanInput in = plan_input_for_catalogue_model(*m, 0, 1, 512, KvTypes{});
      ASSERT_EQ(static_cast<int>(in.layer_bytes.size()), m->n_layer);
      // The layers, the embedding and the output add up to the file.
      double total = static_cast<double>(m->n_vocab) * m->n_embd * (m->tied_output ? 1 : 2) * m->bits / 8;
      for (uint64_t b : in.layer_bytes) total += b;
      const double file = m->weights * m->bits / 8;
      EXPECT_NEAR(total / file, 1.0, 1e-6);
      EXPECT_GT(in.primary_bytes, in.head_bytes);
      // A step reads at most the layer, and a DeltaNet its state, read and written.
      EXPECT_LE(in.layer_read_bytes[0], in.layer_bytes[0] + 2 * m->delta_net_state_floats * sizeof(float));
    }
    ++n;
  }
  EXPECT_GE(n, 8);
}

TEST(ModelCatalogue, ExpertsReadOnlyTheirActiveShare) {
  const auto m = find_catalogue_model("qwen3-30b-a3b:q4_k_m");
  ASSERT_TRUE(m.has_value());
  const PlanInput in = plan_input_for_catalogue_model(*m, 0, 1, 512, KvTypes{});
  EXPECT_LT(in.layer_read_bytes[0] * 8, in.layer_bytes[0]);  // 3.3 of 30.5 B, less the embeddings
}

// A hybrid model (Qwen3.6 27B: 48 Gated DeltaNet layers, 16 attention
// layers) holds KV on its attention layers only, and on the others a state
// that does not grow with the context: 2.2 GB a 32k sequence in f16, where
// 64 attention layers would need 8.6 GB.
TEST(ModelCatalogue, AHybridModelHoldsKvOnlyOnItsAttentionLayers) {
  const auto m = find_catalogue_model("qwen3.6-27b:q4_k_m");
  ASSERT_TRUE(m.has_value());
  const PlanInput in = plan_input_for_catalogue_model(*m, 32768, 1, 512, KvTypes{});
  const uint64_t kv_layer = 32768ull * 2 * 1024 * 2;                      // K and V rows of 1024 f16 values
  const uint64_t state = (3ull * 10240 + 48ull * 128 * 128) * sizeof(float);  // convolution inputs + 48 heads of 128 x 128
  uint64_t total = 0;
  for (int l = 0; l < 64; ++l) {
    EXPECT_EQ(in.layer_kv_bytes[l], l % 4 == 3 ? kv_layer : state) << "layer " << l;
    total += in.layer_kv_bytes[l];
  }
  EXPECT_EQ(total, 16 * kv_layer + 48 * state);
  EXPECT_LT(total * 3, 64 * kv_layer);  // under a third of a dense cache
  // A decode step reads and writes each DeltaNet layer's state beside its weights.
  EXPECT_EQ(in.layer_read_bytes[0], in.layer_read_bytes[3] + 2 * state);
}

// gpt-oss's windowed layers (every other one) hold 128 positions and a
// batch, whatever the context.
TEST(ModelCatalogue, WindowedLayersHoldTheirWindowOnly) {
  const auto m = find_catalogue_model("gpt-oss-20b:q8_0");
  ASSERT_TRUE(m.has_value());
  const PlanInput in = plan_input_for_catalogue_model(*m, 32768, 1, 512, KvTypes{});
  const uint64_t row = 2ull * 512 * 2;  // K and V rows of 512 f16 values
  EXPECT_EQ(in.layer_kv_bytes[0], (128 + 512) * row);
  EXPECT_EQ(in.layer_kv_bytes[1], 32768 * row);
}

// DeepSeek V3's latent attention caches one row of 576 values a token and
// layer (the latent and the rope key; V is the latent): 2.1 GiB for a
// 32k-token sequence in f16, where a full K/V cache of its 128 heads
// (keys of 192, values of 128) would be 71 times that.
TEST(ModelCatalogue, LatentAttentionCachesOneRowOfLatents) {
  for (const char* spec : {"deepseek-v3:q4_k_m", "kimi-k2:q4_k_m"}) {
    const auto m = find_catalogue_model(spec);
    ASSERT_TRUE(m.has_value());
    const PlanInput in = plan_input_for_catalogue_model(*m, 32768, 1, 512, KvTypes{});
    ASSERT_EQ(in.layer_kv_bytes.size(), 61u);
    for (uint64_t bytes : in.layer_kv_bytes) EXPECT_EQ(bytes, 32768ull * 576 * 2);
  }
  const uint64_t dense_layer = 32768ull * 128 * (192 + 128) * 2;
  EXPECT_GT(dense_layer, 70 * 32768ull * 576 * 2);
}

// Gemma 4 31B's windowed layers cache 16 KV heads of 256 for their 1024
// positions (and a batch), its global ones 4 heads of 512 for the whole
// context: the two widths are the catalogue's window_kv_width and kv_width.
TEST(ModelCatalogue, GemmaFourCachesEachLayerAtItsOwnWidth) {
  const auto m = find_catalogue_model("gemma-4-31b:q4_k_m");
  ASSERT_TRUE(m.has_value());
  const PlanInput in = plan_input_for_catalogue_model(*m, 32768, 1, 512, KvTypes{});
  ASSERT_EQ(in.layer_kv_bytes.size(), 60u);
  for (int l = 0; l < 60; ++l)
    EXPECT_EQ(in.layer_kv_bytes[l], l % 6 == 5 ? 32768ull * 2 * 2048 * 2 : (1024ull + 512) * 2 * 4096 * 2) << l;
}

TEST(ModelCatalogue, UnknownNamesAndQuantisationsAreNamed) {
  auto error_of = [](const std::string& spec) {
    try {
      find_catalogue_model(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("gpt-5:q4_0").find("known: deepseek-v3, gemma-4-26b-a4b, gemma-4-31b, glm-4.5-air, glm-4.6, gpt-oss-120b, gpt-oss-20b, kimi-k2, llama-2-7b"), std::string::npos)
      << error_of("gpt-5:q4_0");
  EXPECT_NE(error_of("llama-2-7b:q9").find("no quantisation 'q9'"), std::string::npos);
  EXPECT_FALSE(find_catalogue_model("/no/colon/model.gguf").has_value());
}

}  // namespace
}  // namespace shoal
