#include "cluster/primary/prompt_placement.h"

#include <algorithm>

#include <fmt/format.h>

#include "util/error.h"

namespace shoal {
namespace {

// Layers [begin, end) of each plan on device d, for its memory: the
// weights of every layer it serves in either, the decode plan's cache, and
// the prompt's cache of the layers it computes for one request.
std::string misfit(const Plan& prompt, const Plan& decode, const PlanInput& in, const RequestShape& request) {
  for (size_t d = 0; d < in.devices.size(); ++d) {
    const StageAssignment &p = prompt.stages.at(d), &q = decode.stages.at(d);
    uint64_t need = q.weight_bytes + q.kv_bytes + (d == 0 ? in.primary_bytes : 0);
    for (int l = p.layer_begin; l < p.layer_end; ++l) {
      if (l < q.layer_begin || l >= q.layer_end) need += in.layer_bytes[l];
      if (l < static_cast<int>(in.layer_kv_row_bytes.size()))
        need += in.layer_kv_row_bytes[l] * static_cast<uint64_t>(request.prompt_tokens) + in.layer_state_bytes[l];
    }
    const uint64_t usable = in.devices[d].free_memory > in.reserve_bytes ? in.devices[d].free_memory - in.reserve_bytes : 0;
    if (need > usable)
      return fmt::format("{} would hold {:.1f} GiB for both plans and has {:.1f} GiB", in.devices[d].address,
                         need / 1073741824.0, usable / 1073741824.0);
  }
  return "";
}

// A plan with layers on `devices` only, split among them by memory.
Plan plan_on(const PlanInput& input, const std::vector<int>& devices) {
  PlanInput in = input;
  in.tensor_split.assign(in.devices.size(), 0.0);
  for (int d : devices) {
    const DeviceInfo& dev = in.devices.at(d);
    in.tensor_split[d] = std::max<double>(1.0, static_cast<double>(dev.free_memory > in.reserve_bytes
                                                                       ? dev.free_memory - in.reserve_bytes
                                                                       : 0));
  }
  return make_plan(in);
}

std::string devices_of(const Plan& plan, const PlanInput& in) {
  std::string s;
  for (const StageAssignment& a : plan.stages)
    if (a.layer_end > a.layer_begin)
      s += fmt::format("{}{} (layers {}-{})", s.empty() ? "" : ", ", in.devices[a.device].address, a.layer_begin,
                       a.layer_end - 1);
  return s;
}

}  // namespace

PromptPlacement choose_prompt_placement(const Plan& decode_plan, const PlanInput& input, Relay relay,
                                        const RequestShape& request, const std::vector<int>& prompt_devices,
                                        int n_batch, int micro_batch, int first_candidate) {
  PromptPlacement r;
  r.plan = decode_plan;
  r.joint = r.placed = predict_request(decode_plan, decode_plan, input, relay, request, n_batch, micro_batch);
  auto consider = [&](const Plan& plan) {
    const RequestPrediction p = predict_request(plan, decode_plan, input, relay, request, n_batch, micro_batch);
    if (p.total_ms < r.placed.total_ms) {
      r.plan = plan;
      r.placed = p;
      r.split = true;
    }
  };
  if (!prompt_devices.empty()) {
    const Plan plan = plan_on(input, prompt_devices);
    if (const std::string why = misfit(plan, decode_plan, input, request); !why.empty())
      fail("--prefill-on: the prompt's plan does not fit beside the decode plan: {}", why);
    r.plan = plan;
    r.placed = predict_request(plan, decode_plan, input, relay, request, n_batch, micro_batch);
    r.split = true;
    return r;
  }
  const PromptPlacement joint = r;
  for (int d = first_candidate; d < static_cast<int>(input.devices.size()); ++d) {
    Plan plan;
    try {
      plan = plan_on(input, {d});
    } catch (const Error& e) {
      r.refused.push_back(fmt::format("{}: {}", input.devices[d].address, e.what()));
      continue;
    }
    if (const std::string why = misfit(plan, decode_plan, input, request); !why.empty()) {
      r.refused.push_back(why);
      continue;
    }
    consider(plan);
  }
  // Noise in the devices' figures must not move prompts for a small gain.
  if (r.split && r.placed.total_ms > (1.0 - kSpeedSplitGain) * r.joint.total_ms) {
    std::vector<std::string> refused = std::move(r.refused);
    r = joint;
    r.refused = std::move(refused);
  }
  return r;
}

std::string format_prompt_placement(const PromptPlacement& placement, const Plan& decode_plan, const PlanInput& in,
                                    const RequestShape& request) {
  auto line = [&](const std::string& who, const RequestPrediction& p) {
    std::string s = fmt::format("  {:<44} TTFT {:7.2f} s, tg {:6.2f} ms/token ({:6.1f} tok/s), total {:7.2f} s\n", who,
                                p.prefill_ms / 1e3, p.token_ms, 1e3 / p.token_ms, p.total_ms / 1e3);
    if (p.cache_bytes > 0)
      s += fmt::format("  {:<44} cache moved: {:.2f} GB in {:.2f} s, {:.2f} s of it after the prompt\n", "",
                       p.cache_bytes / 1e9, p.cache_ms / 1e3, p.exposed_ms / 1e3);
    return s;
  };
  std::string s = fmt::format("a request of {} prompt tokens and {} generated (--prompt-tokens, --gen-tokens):\n",
                              request.prompt_tokens, request.generated);
  s += line("prompt and tokens on the plan above", placement.joint);
  if (placement.split) {
    s += line(fmt::format("prompt on {}", devices_of(placement.plan, in)), placement.placed);
    s += fmt::format("  takes: prompts on {}, tokens on {} ({:.2f}x the joint placement's time for this request)\n",
                     devices_of(placement.plan, in), devices_of(decode_plan, in),
                     placement.joint.total_ms / placement.placed.total_ms);
  } else {
    s += "  takes: the joint placement (no device's prompts win by 10 % or more)\n";
  }
  for (const std::string& why : placement.refused) s += fmt::format("  (prompts not planned on {})\n", why);
  return s;
}

}  // namespace shoal
