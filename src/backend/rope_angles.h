#pragma once
// The cos and sin a rope rotates pair i of a head by at a position, as
// llama.cpp's ggml computes them (rope_yarn): theta = pos * base^(-2i/d) /
// factor_i, scaled by freq_scale, with YaRN's ramp between the scaled and
// the unscaled angle and its magnitude scale. One place for every backend
// (the CPU rotates with them, Vulkan uploads them as a table), so both
// rotate by the same bits.
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace shoal {

class RopeAngles {
 public:
  explicit RopeAngles(const RopeParams& p);
  int pairs() const { return static_cast<int>(freqs_.size()); }
  void at(int32_t position, int i, float* cos_out, float* sin_out) const;

 private:
  RopeParams p_;
  std::vector<double> freqs_;  // base^(-2i/d)
  const float* factors_;       // divisors per pair, or null
  double ramp_low_ = 0, ramp_high_ = 0, mscale_ = 1;
};

}  // namespace shoal
