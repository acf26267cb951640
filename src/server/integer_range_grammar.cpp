#include "server/integer_range_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "util/error.h"

namespace shoal::server {
namespace {

constexpr int kMaxDigits = 16;  // as the "integral-part" rule of the JSON grammar

std::string any_digits(size_t n) { return n == 0 ? "" : fmt::format("[0-9]{{{}}}", n); }

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : " | ") + p;
  return parts.size() > 1 ? "(" + out + ")" : out;
}

// The digit strings of a's length from a to b (a <= b, equal lengths).
std::string digits_between(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  const std::string a_rest = a.substr(1), b_rest = b.substr(1);
  auto then = [](const std::string& head, const std::string& tail) { return tail.empty() ? head : head + " " + tail; };
  if (a[0] == b[0]) return then(fmt::format("[{}]", a[0]), digits_between(a_rest, b_rest));
  const bool a_low = std::all_of(a_rest.begin(), a_rest.end(), [](char c) { return c == '0'; });
  const bool b_high = std::all_of(b_rest.begin(), b_rest.end(), [](char c) { return c == '9'; });
  std::vector<std::string> alts;
  char first = a[0], last = b[0];
  // a's leading digit with the rest at least a's; b's with the rest at most b's; whole digits between.
  if (!a_low) alts.push_back(then(fmt::format("[{}]", first++), digits_between(a_rest, std::string(a_rest.size(), '9'))));
  if (!b_high) --last;
  if (first <= last) alts.push_back(then(fmt::format("[{}-{}]", first, last), any_digits(a_rest.size())));
  if (!b_high) alts.push_back(then(fmt::format("[{}]", b[0]), digits_between(std::string(b_rest.size(), '0'), b_rest)));
  return join(alts);
}

// Non-negative integers from lo to hi (open when hi is empty), no leading zeros.
std::string magnitudes(uint64_t lo, std::optional<uint64_t> hi) {
  const size_t lo_digits = std::to_string(lo).size();
  const size_t hi_digits = hi ? std::to_string(*hi).size() : lo_digits;
  std::vector<std::string> alts;
  for (size_t n = lo_digits; n <= hi_digits; ++n) {
    const std::string a = n == lo_digits ? std::to_string(lo) : "1" + std::string(n - 1, '0');
    const std::string b = hi && n == hi_digits ? std::to_string(*hi) : std::string(n, '9');
    alts.push_back(digits_between(a, b));
  }
  if (!hi && lo_digits < kMaxDigits) alts.push_back(fmt::format("[1-9] [0-9]{{{},{}}}", lo_digits, kMaxDigits - 1));
  return join(alts);
}

}  // namespace

std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  for (const auto& bound : {lo, hi})
    if (bound && (*bound > kMaxIntegerBound || *bound < -kMaxIntegerBound))
      fail("the bound {} is past the {} digits of an integer this server writes", *bound, kMaxDigits - 1);
  if (lo && hi && *lo > *hi) fail("minimum {} is above maximum {}: no integer fits", *lo, *hi);
  std::vector<std::string> alts;
  // Negative numbers: "-" and a magnitude from max(1, -hi) up to -lo.
  if (!lo || *lo < 0) {
    const uint64_t from = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    const std::optional<uint64_t> to = lo ? std::optional<uint64_t>(static_cast<uint64_t>(-*lo)) : std::nullopt;
    alts.push_back("\"-\" " + magnitudes(from, to));
  }
  if (!hi || *hi >= 0) {
    const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    const std::optional<uint64_t> to = hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt;
    alts.push_back(magnitudes(from, to));
  }
  return join(alts);
}

}  // namespace shoal::server
