#pragma once
// A whole-number option checked as it is parsed: a value outside its range
// (a zero or negative context, batch or slot count) is refused with the
// range in the message, instead of failing later or being clamped unseen.
#include <CLI/CLI.hpp>

#include <charconv>
#include <string>

#include <fmt/format.h>

namespace shoal::cli {

// CLI11 puts the option's name in front of the message.
inline CLI::Validator whole_number_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        long long v = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || at != end) return fmt::format("'{}' is not a whole number ({}..{})", text, lo, hi);
        if (v < lo || v > hi) return fmt::format("{} is outside {}..{}", v, lo, hi);
        return "";
      },
      fmt::format("{}..{}", lo, hi));
}

}  // namespace shoal::cli
