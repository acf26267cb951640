#include "grammar/grammar.h"

namespace shoal::grammar {

bool Grammar::matches(const Symbol& chars, uint32_t cp) const {
  bool in = false;
  for (uint32_t i = 0; i < chars.count && !in; ++i) {
    const CharRange& r = ranges[chars.first + i];
    in = cp >= r.lo && cp <= r.hi;
  }
  return in != chars.negated;
}

bool Grammar::may_match(const Symbol& chars, uint32_t lo, uint32_t hi) const {
  if (!chars.negated) {
    for (uint32_t i = 0; i < chars.count; ++i) {
      const CharRange& r = ranges[chars.first + i];
      if (r.lo <= hi && r.hi >= lo) return true;
    }
    return false;
  }
  // Negated: some point of [lo, hi] lies outside every range.
  for (uint32_t x = lo;;) {
    bool covered = false;
    for (uint32_t i = 0; i < chars.count && !covered; ++i) {
      const CharRange& r = ranges[chars.first + i];
      if (r.lo <= x && x <= r.hi) {
        covered = true;
        if (r.hi >= hi) return false;
        x = r.hi + 1;
      }
    }
    if (!covered) return true;
  }
}

}  // namespace shoal::grammar
