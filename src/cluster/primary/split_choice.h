#pragma once
// Layer split or tensor split (-sm layer|tensor|auto): both predicted from
// the same measured devices and links (cost_model.h), and the one asked
// for, or with auto the faster, chosen with the reason printed beside both.
#include <string>
#include <vector>

#include "cluster/primary/cost_model.h"
#include "cluster/primary/planner.h"

namespace shoal {

// Devices first..last in groups of group_size, in order (0: one group of
// all); the last group takes what is left.
std::vector<std::vector<int>> tensor_groups(int last, int group_size, int first = 1);

struct SplitChoice {
  SplitMode mode = SplitMode::layer;  // what runs: layer or tensor, never automatic
  double layer_token_ms = 0.0;        // the layer plan's decode step
  TensorGroupPrediction tensor;       // the workers in tensor groups (token_ms 0: not possible)
  std::vector<std::vector<int>> groups;
  std::vector<std::vector<int>> weights;  // per group, its members' share weights (tensor_group_weights)
  std::string reason;
};

// `layer_plan` is make_plan(input)'s; group_size: --group-size (0: all the
// workers in one group). A tensor split needs two workers or more; with
// fewer, tensor and auto run the layer plan (the reason says so).
// primary_computes: the primary's machine is a member too (a described
// cluster, where a worker would run beside the primary).
SplitChoice choose_split(SplitMode asked, const Plan& layer_plan, const PlanInput& input, int group_size = 0,
                         bool primary_computes = false);
// Two lines of predictions and the choice, for `shoal plan` and the split printout.
std::string format_split_choice(const SplitChoice& choice, const PlanInput& input);

}  // namespace shoal
