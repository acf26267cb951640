#pragma once
// A mutator for the text fuzzers (chat templates, grammars) that reaches
// the sizes hostile inputs have. libFuzzer's own mutations flip, insert and
// copy a few bytes at a time, so in 20 s they never build `1+1+…+1` ten
// thousand terms long, a loop of `[0] * 4000000`, or a rule that is its
// successor twice over forty levels: the shapes an adversarial pass found.
// Besides the byte-level mutations (half the time), this one
//   - repeats a slice of the input many times (a chain: `|string|string…`,
//     `{% if x %}{% if x %}…`, `r1 | r1 | …`),
//   - turns a number into a large one (range(4) → range(4000000)),
//   - inserts a fragment the target knows (its dictionary of constructs),
//   - appends a whole generated shape of the target's, `depth` levels deep.
// Each target defines its fragments and its shape generator and includes
// this header once.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace shoal::fuzz {

// The target's own: constructs to insert, and a deep shape of `depth` levels.
extern const std::vector<std::string_view> kFragments;
std::string deep_shape(std::mt19937& rng, int depth);

inline size_t mutate_structure(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  std::mt19937 rng(seed);
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  std::string s(reinterpret_cast<const char*>(data), size);
  switch (below(8)) {
    case 0:
    case 1:
    case 2:
    case 3:
      return LLVMFuzzerMutate(data, size, max_size);
    case 4: {  // repeat a slice
      if (s.empty()) break;
      const size_t at = below(s.size());
      const size_t len = 1 + below(std::min<size_t>(64, s.size() - at));
      const std::string piece = s.substr(at, len);
      const size_t room = max_size > s.size() ? (max_size - s.size()) / len : 0;
      const size_t times = 1 + below(std::max<size_t>(1, room));
      std::string grown;
      grown.reserve(times * len);
      for (size_t i = 0; i < times; ++i) grown += piece;
      s.insert(at + len, grown);
      break;
    }
    case 5: {  // a number made large
      std::vector<size_t> digits;
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] >= '0' && s[i] <= '9' && (i == 0 || s[i - 1] < '0' || s[i - 1] > '9')) digits.push_back(i);
      if (digits.empty()) break;
      const size_t at = digits[below(digits.size())];
      size_t end = at;
      while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
      s.replace(at, end - at, std::to_string(1 + below(10)) + std::string(below(10), '0'));
      break;
    }
    case 6: {  // a construct of the target's
      const std::string_view f = kFragments[below(kFragments.size())];
      s.insert(below(s.size() + 1), f);
      break;
    }
    default: {  // a deep shape, as deep as fits: on its own, or after the input
      const std::string shape = deep_shape(rng, 1 + static_cast<int>(below(20000)));
      s = below(2) ? shape : s + shape;
      break;
    }
  }
  if (s.size() > max_size) s.resize(max_size);
  std::memcpy(data, s.data(), s.size());
  return s.size();
}

}  // namespace shoal::fuzz

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return shoal::fuzz::mutate_structure(data, size, max_size, seed);
}
