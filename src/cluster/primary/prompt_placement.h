#pragma once
// Where a request's prompt runs: on the plan that decodes (joint), or on a
// plan of its own — a machine that computes faster takes the prompts, one
// that reads memory faster the tokens (a DGX Spark beside a Mac Studio).
// The cost model's request prediction (cost_model.h) decides, counting the
// cache the prompt leaves behind moving to the decoding devices. A machine
// serving a layer in both plans holds its weights once; in either, it holds
// the weights of every layer it serves.
#include <string>
#include <vector>

#include "cluster/primary/cost_model.h"

namespace shoal {

struct PromptPlacement {
  Plan plan;                     // the prompt's plan (the decode plan's, when joint)
  bool split = false;            // a plan of its own
  RequestPrediction joint;       // prompt and tokens on the decode plan
  RequestPrediction placed;      // as chosen (== joint when not split)
  // Candidates left out, each with why (memory), for the printout.
  std::vector<std::string> refused;
};

// prompt_devices: the devices to run prompts on (--prefill-on: a split by
// memory among them, taken whatever it predicts; a plan that does not fit
// throws). Empty: each device from first_candidate on in turn with every
// layer, where its memory holds them beside what it decodes, and the
// fastest taken only where it beats the joint placement by kSpeedSplitGain.
PromptPlacement choose_prompt_placement(const Plan& decode_plan, const PlanInput& input, Relay relay,
                                        const RequestShape& request, const std::vector<int>& prompt_devices,
                                        int n_batch = 0, int micro_batch = 0, int first_candidate = 0);

// "prompt on spark (layers 0-31), tokens on mac: ..." lines for `shoal plan`.
std::string format_prompt_placement(const PromptPlacement& placement, const Plan& decode_plan,
                                    const PlanInput& input, const RequestShape& request);

}  // namespace shoal
