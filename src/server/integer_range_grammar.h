#pragma once
// A GBNF body for the JSON integers in a range: JSON Schema's minimum /
// maximum (and their exclusive forms) on an integer held by the grammar
// itself, digit by digit, instead of by rejecting samples. Numbers have no
// leading zeros and at most 16 digits (the integral part the JSON rules
// allow), so bounds must lie within ±(10^15 - 1) here.
#include <cstdint>
#include <optional>
#include <string>

namespace shoal::server {

inline constexpr int64_t kMaxIntegerBound = 999'999'999'999'999;

// The integers n with lo <= n <= hi (either side may be open). Throws
// shoal::Error for an empty range or a bound past kMaxIntegerBound.
std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace shoal::server
