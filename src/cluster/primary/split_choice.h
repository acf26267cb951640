#pragma once
// Layer split or tensor split (-sm layer|tensor|auto): both predicted from
// the same measured devices and links (cost_model.h), and the one asked
// for, or with auto the faster, chosen with the reason printed beside both.
#include <string>
#include <vector>

#include "cluster/primary/cost_model.h"
#include "cluster/primary/planner.h"

namespace shoal {

struct SplitChoice {
  SplitMode mode = SplitMode::layer;  // what runs: layer or tensor, never automatic
  double layer_token_ms = 0.0;        // the layer plan's decode step
  TensorGroupPrediction tensor;       // every worker as one group (token_ms 0: not possible)
  std::vector<int> members;           // the group: every worker (devices 1..n)
  std::string reason;
};

// `layer_plan` is make_plan(input)'s. A tensor group needs two workers or
// more; with fewer, tensor and auto run the layer plan (the reason says so).
SplitChoice choose_split(SplitMode asked, const Plan& layer_plan, const PlanInput& input);
// Two lines of predictions and the choice, for `shoal plan` and the split printout.
std::string format_split_choice(const SplitChoice& choice, const PlanInput& input);

}  // namespace shoal
