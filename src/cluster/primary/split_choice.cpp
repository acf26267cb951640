#include "cluster/primary/split_choice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>

namespace shoal {

std::vector<std::vector<int>> tensor_groups(int last, int group_size, int first) {
  const int size = group_size > 0 ? group_size : last - first + 1;
  std::vector<std::vector<int>> groups;
  for (int d = first; d <= last; ++d) {
    if (groups.empty() || static_cast<int>(groups.back().size()) == size) groups.emplace_back();
    groups.back().push_back(d);
  }
  return groups;
}

SplitChoice choose_split(SplitMode asked, const Plan& layer_plan, const PlanInput& input, int group_size,
                         bool primary_computes) {
  SplitChoice c;
  c.layer_token_ms = layer_plan.predicted_token_ms;
  const int last = static_cast<int>(input.devices.size()) - 1, first = primary_computes ? 0 : 1;
  if (last - first + 1 >= 2) {
    c.groups = tensor_groups(last, group_size, first);
    c.weights = tensor_group_weights(input, c.groups);
    c.tensor = predict_tensor_groups(input, c.groups);
  }
  const bool grouped = c.tensor.token_ms > 0 && std::any_of(c.groups.begin(), c.groups.end(),
                                                            [](const auto& g) { return g.size() >= 2; });
  const std::string misfit = grouped ? tensor_group_misfit(input, c.groups) : "";
  const bool possible = grouped && misfit.empty();
  const std::string why_not = !grouped ? "a tensor split needs two machines in a group"
                                       : fmt::format("the tensor split does not fit: {}", misfit);
  switch (asked) {
    case SplitMode::layer:
      c.reason = "-sm layer";
      break;
    case SplitMode::tensor:
      c.mode = possible ? SplitMode::tensor : SplitMode::layer;
      c.reason = possible ? "-sm tensor" : fmt::format("-sm tensor: {}; the layers are split instead", why_not);
      break;
    case SplitMode::automatic:
      if (!possible) {
        c.reason = fmt::format("auto: {}", why_not);
      } else if (c.tensor.token_ms < c.layer_token_ms) {
        c.mode = SplitMode::tensor;
        c.reason = fmt::format("auto: the tensor split is predicted {:.2f}x faster (its {} all-gathers a token cost "
                               "{:.2f} ms, less than the compute it divides saves)",
                               c.layer_token_ms / c.tensor.token_ms,
                               kTensorExchangesPerLayer * static_cast<int>(input.layer_bytes.size()),
                               c.tensor.exchange_ms);
      } else {
        c.reason = fmt::format("auto: the layer split is predicted {:.2f}x faster (a tensor split's {} all-gathers a "
                               "token would cost {:.2f} ms, more than dividing the compute saves)",
                               c.tensor.token_ms / c.layer_token_ms,
                               kTensorExchangesPerLayer * static_cast<int>(input.layer_bytes.size()),
                               c.tensor.exchange_ms);
      }
      break;
  }
  return c;
}

std::string format_split_choice(const SplitChoice& c, const PlanInput& input) {
  std::string out = fmt::format("  layer split:  tg {:7.2f} ms/token ({:6.1f} tok/s)\n", c.layer_token_ms,
                                c.layer_token_ms > 0 ? 1e3 / c.layer_token_ms : 0.0);
  if (c.tensor.token_ms > 0) {
    std::string names;
    for (size_t g = 0; g < c.groups.size(); ++g) {
      std::string members;
      for (int d : c.groups[g]) members += (members.empty() ? "" : " + ") + input.devices.at(d).address;
      const std::vector<int>& w = c.weights.at(g);
      if (w.size() > 1 && std::adjacent_find(w.begin(), w.end(), std::not_equal_to<>()) != w.end())
        members += fmt::format(" (shares {})", fmt::join(w, ":"));
      names += (names.empty() ? "" : ", then ") + members;
    }
    out += fmt::format("  tensor split: tg {:7.2f} ms/token ({:6.1f} tok/s) on {}: compute {:.2f} ms, "
                       "all-gathers {:.2f} ms, hops {:.2f} ms, head {:.2f} ms{}; pp512 {:.1f} tok/s\n",
                       c.tensor.token_ms, c.tensor.tok_s, names, c.tensor.compute_ms, c.tensor.exchange_ms,
                       c.tensor.hop_ms, c.tensor.head_ms, c.tensor.head_on_group ? " (on the last group)" : "",
                       c.tensor.prefill_tok_s);
  }
  out += fmt::format("split mode: {} ({})\n", c.mode == SplitMode::tensor ? "tensor" : "layer", c.reason);
  return out;
}

}  // namespace shoal
