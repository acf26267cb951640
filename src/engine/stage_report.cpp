#include "engine/stage_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/stage_supervisor.h"

namespace shoal {

std::vector<StageReport> stage_reports(const Engine& engine) {
  std::vector<StagePrediction> predicted;
  if (StageSupervisor* sup = engine.supervisor()) predicted = sup->status().predicted;
  std::vector<StageReport> out;
  for (const StageSnapshot& s : engine.pipeline().snapshot()) {
    StageReport r;
    r.layer_begin = s.layer_begin;
    r.layer_end = s.layer_end;
    for (const StageDevice& d : s.devices) {
      r.devices += (r.devices.empty() ? "" : " -> ") + d.address;
      if (r.backend.empty()) r.backend = d.backend;
    }
    // A device's prediction covers its layers; a stage may hold part of
    // them (-ngl splits one machine in two): its share by layer count.
    for (const StagePrediction& p : predicted) {
      const int overlap = std::min(p.layer_end, s.layer_end) - std::max(p.layer_begin, s.layer_begin);
      if (overlap > 0) r.predicted_ms += p.predicted_ms * overlap / (p.layer_end - p.layer_begin);
    }
    r.steps = s.decode_steps;
    r.measured_ms = s.decode_steps ? s.decode_seconds * 1e3 / s.decode_steps : 0.0;
    out.push_back(r);
  }
  return out;
}

std::string format_stage_reports(const std::vector<StageReport>& reports, double predicted_token_ms) {
  std::string out = fmt::format("{:<34} {:<10} {:>14} {:>14} {:>8} {:>7}\n", "stage", "layers", "predicted ms",
                                "measured ms", "steps", "error");
  for (const StageReport& r : reports) {
    const std::string error = r.predicted_ms > 0 && r.measured_ms > 0
                                  ? fmt::format("{:+.0f}%", 100 * (r.measured_ms / r.predicted_ms - 1))
                                  : "-";
    out += fmt::format("{:<34} {:<10} {:>14} {:>14.3f} {:>8} {:>7}\n", r.devices,
                       fmt::format("{}-{}", r.layer_begin, r.layer_end - 1),
                       r.predicted_ms > 0 ? fmt::format("{:.3f}", r.predicted_ms) : "-", r.measured_ms, r.steps, error);
  }
  if (predicted_token_ms > 0) out += fmt::format("predicted decode step: {:.3f} ms (head included)\n", predicted_token_ms);
  return out;
}

}  // namespace shoal
