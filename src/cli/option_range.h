#pragma once
// Numeric options checked as they are parsed: a value outside its range (a
// zero or negative context, batch or slot count, a temperature of -1, a
// port past 65535, NaN or an infinity anywhere) is refused with the option
// named and the range in the message, instead of failing later, wrapping
// or being clamped unseen.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <string>
#include <thread>

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

// A number in [lo, hi]; NaN and the infinities are never in range (CLI11's
// own Range lets NaN through: every comparison with it is false).
inline CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double v = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || at != end || !std::isfinite(v))
          return fmt::format("'{}' is not a finite number ({}..{})", text, lo, hi);
        if (!(v >= lo && v <= hi)) return fmt::format("{} is outside {}..{}", text, lo, hi);
        return "";
      },
      fmt::format("{}..{}", lo, hi));
}

// A TCP or UDP port; 0 asks the system for any free one.
inline CLI::Validator port_number() { return whole_number_in(0, 65535); }

// Threads: at least one, and at most four per hardware thread (more only
// wait on each other; a typo of 100000 would create threads until the
// system refuses).
inline CLI::Validator thread_count() {
  const long long hw = std::max(1u, std::thread::hardware_concurrency());
  const long long most = 4 * hw;
  return CLI::Validator(
      [hw, most](std::string& text) -> std::string {
        long long v = 0;
        const char* end = text.data() + text.size();
        const auto [at, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || at != end) return fmt::format("'{}' is not a whole number (1..{})", text, most);
        if (v < 1) return fmt::format("{} threads: at least 1", v);
        if (v > most)
          return fmt::format("{} threads is more than 4 x this machine's {} hardware threads (at most {})", v, hw,
                             most);
        return "";
      },
      fmt::format("1..{}", most));
}

}  // namespace shoal::cli
