#pragma once
// Predicted against measured, per stage: what the plan said a decode step
// would cost on each device (hop included) beside the time single-token
// steps took there. `shoal run -v`, `shoal bench` on a cluster and /v1/cluster show it.
#include <cstdint>
#include <string>
#include <vector>

namespace shoal {

class Engine;

struct StageReport {
  std::string devices;     // "local", "host:port", or a chain "a -> b"
  std::string backend;
  int layer_begin = 0;
  int layer_end = 0;       // exclusive
  double predicted_ms = 0; // 0: no plan (a local run) or no prediction for these layers
  double measured_ms = 0;  // mean of the single-token steps; 0 before the first
  uint64_t steps = 0;
};

std::vector<StageReport> stage_reports(const Engine& engine);
// A table, one line per stage, then the predicted whole step if known.
std::string format_stage_reports(const std::vector<StageReport>& reports, double predicted_token_ms);

}  // namespace shoal
