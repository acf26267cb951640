#include "backend/rope_angles.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace shoal {
namespace {

// The pair index where the rotation reaches n_rot full turns over the
// original context (ggml_rope_yarn_corr_dim).
double correction_dim(int n_dims, int orig_ctx, double n_rot, double base) {
  return n_dims * std::log(orig_ctx / (n_rot * 2 * std::numbers::pi)) / (2 * std::log(base));
}

}  // namespace

RopeAngles::RopeAngles(const RopeParams& p)
    : p_(p), freqs_(static_cast<size_t>(p.rope_dim / 2)), factors_(p.freq_factors ? p.freq_factors->f32() : nullptr) {
  for (int i = 0; i < pairs(); ++i) freqs_[i] = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.rope_dim);
  mscale_ = p.yarn.attn_factor;
  if (p.yarn.ext_factor != 0.0f) {
    ramp_low_ = std::max(0.0, std::floor(correction_dim(p.rope_dim, p.yarn.orig_ctx, p.yarn.beta_fast, p.freq_base)));
    ramp_high_ = std::min(static_cast<double>(p.rope_dim - 1),
                          std::ceil(correction_dim(p.rope_dim, p.yarn.orig_ctx, p.yarn.beta_slow, p.freq_base)));
    mscale_ *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
  }
}

void RopeAngles::at(int32_t position, int i, float* cos_out, float* sin_out) const {
  double theta = static_cast<double>(position) * p_.freq_scale * freqs_[i];
  if (factors_) theta /= factors_[i];
  if (p_.yarn.ext_factor != 0.0f) {
    double extrapolated = static_cast<double>(position) * freqs_[i];
    if (factors_) extrapolated /= factors_[i];
    const double y = (i - ramp_low_) / std::max(0.001, ramp_high_ - ramp_low_);
    const double mix = (1.0 - std::clamp(y, 0.0, 1.0)) * p_.yarn.ext_factor;
    theta = theta * (1.0 - mix) + extrapolated * mix;
  }
  *cos_out = static_cast<float>(std::cos(theta) * mscale_);
  *sin_out = static_cast<float>(std::sin(theta) * mscale_);
}

}  // namespace shoal
