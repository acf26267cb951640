// The cost model against the record: every published measurement in
// tests/data/published_cluster_measurements.toml predicted from the device
// and model catalogues alone, within 25 % (the bar: a plan made
// before buying is useful if it is that close). Prints predicted against
// published for every row; a row marked `excluded` (with its reason) is
// printed and not held to the bar.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <toml++/toml.h>

#include "cluster/primary/cost_model.h"
#include "cluster/primary/described_cluster.h"
#include "cluster/primary/model_catalogue.h"
#include "cluster/primary/prompt_placement.h"

namespace shoal {
namespace {

constexpr double kTolerance = 0.25;

struct Row {
  std::string name;
  double published = 0, predicted = 0;
};

Row predict_row(const toml::table& m, const std::string& file) {
  Row row;
  row.name = m["name"].value_or(std::string("?"));
  row.published = m["tg"].value_or(0.0);
  const auto model = find_catalogue_model(m["model"].value_or(std::string()));
  if (!model) throw std::runtime_error(row.name + ": no catalogue model");
  // llama-bench's defaults: one sequence, a short context.
  PlanInput in = plan_input_for_catalogue_model(*model, 512, 1, 512, KvTypes{});
  in.devices = described_devices(m["device"].as_array(), file + ": " + row.name);
  in.split = SplitPolicy::memory;  // llama.cpp's default split
  const std::string relay = m["relay"].value_or(std::string());
  if (relay == "tensor") {
    // Every device after the first (the primary, which keeps the head) in
    // one tensor group, each with its share of every layer's reads. The
    // exchanges are the tool's: `exchanges_per_layer` a layer, each
    // carrying `exchange_width` values per token (llama.cpp's and
    // distributed-llama's tensor split: two all-reduces of the hidden
    // state a layer).
    const int exchanges = m["exchanges_per_layer"].value_or(2);
    const double width = m["exchange_width"].value_or(2.0);  // times n_embd per layer
    in.layer_split_bytes = in.layer_read_bytes;
    in.layer_exchange_values.assign(in.layer_bytes.size(),
                                    static_cast<uint64_t>(width * in.activation_bytes / sizeof(float)));
    std::vector<int> group;
    for (int d = 1; d < static_cast<int>(in.devices.size()); ++d) group.push_back(d);
    row.predicted = predict_tensor_groups(in, {group}, 512, 0, exchanges).tok_s;
    return row;
  }
  in.relay = relay == "llama_rpc" ? Relay::llama_rpc : Relay::shoal_star;
  if (relay != "llama_rpc" && relay != "local") throw std::runtime_error(row.name + ": relay " + relay);
  if (const toml::array* split = m["tensor_split"].as_array())
    for (const auto& v : *split) in.tensor_split.push_back(v.value_or(0.0));
  const Plan plan = make_plan(in);
  if (m.contains("total_s")) {
    // A whole request (a prompt, then generated tokens) in seconds, its
    // prompt on the plan or on the device `prompt_on` names.
    row.published = m["total_s"].value_or(0.0);
    const RequestShape request{m["prompt_tokens"].value_or(0), m["generated"].value_or(0)};
    std::vector<int> prompt_on;
    if (auto name = m["prompt_on"].value<std::string>())
      for (size_t d = 0; d < in.devices.size(); ++d)
        if (in.devices[d].address == *name) prompt_on.push_back(static_cast<int>(d));
    if (m.contains("prompt_on") && prompt_on.empty()) throw std::runtime_error(row.name + ": prompt_on names no device");
    // One batch, as the tool ran the prompt.
    const int batch = request.prompt_tokens;
    row.predicted = (prompt_on.empty() ? predict_request(plan, plan, in, in.relay, request, batch)
                                       : choose_prompt_placement(plan, in, in.relay, request, prompt_on, batch).placed)
                        .total_ms /
                    1e3;
    return row;
  }
  row.predicted = predict(plan, in, in.relay).tok_s;
  return row;
}

TEST(PublishedMeasurements, EveryRowIsPredictedWithin25Percent) {
  const std::string file = std::string(SHOAL_SOURCE_DIR) + "/tests/data/published_cluster_measurements.toml";
  const toml::table doc = toml::parse_file(file);
  const toml::array* rows = doc["measurement"].as_array();
  ASSERT_NE(rows, nullptr);
  ASSERT_GE(rows->size(), 8u);
  std::printf("%-78s %10s %10s %8s\n", "measurement", "published", "predicted", "error");
  int within = 0, held = 0;
  for (const auto& node : *rows) {
    const toml::table& m = *node.as_table();
    ASSERT_TRUE(m.contains("source"));
    const Row r = predict_row(m, file);
    const double error = r.predicted / r.published - 1.0;
    const auto excluded = m["excluded"].value<std::string>();
    std::printf("%-78s %10.2f %10.2f %+7.0f%%%s\n", r.name.c_str(), r.published, r.predicted, 100 * error,
                excluded ? " (excluded)" : "");
    if (excluded) continue;
    ++held;
    EXPECT_LE(std::abs(error), kTolerance) << r.name;
    within += std::abs(error) <= kTolerance;
  }
  std::printf("%d of %d rows held to the bar within %.0f%%\n", within, held, 100 * kTolerance);
  EXPECT_GE(held, 7);
}

}  // namespace
}  // namespace shoal
