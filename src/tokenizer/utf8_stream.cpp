#include "tokenizer/utf8_stream.h"

namespace shoal {
namespace {

const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Well-formed UTF-8 (Unicode Table 3-7): the length a lead byte announces and
// the range its second byte must fall in (later bytes are 80..BF). Length 0
// marks a byte that starts no sequence.
struct Lead {
  int length;
  unsigned char low;
  unsigned char high;
};

Lead classify(unsigned char c) {
  if (c < 0x80) return {1, 0, 0};
  if (c < 0xC2) return {0, 0, 0};
  if (c < 0xE0) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};  // no overlong forms
  if (c == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (c < 0xF0) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c < 0xF4) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  return drain(false);
}

std::string Utf8Stream::flush() { return drain(true); }

std::string Utf8Stream::drain(bool at_end) {
  std::string out;
  out.reserve(pending_.size());
  size_t i = 0;
  while (i < pending_.size()) {
    const auto c = static_cast<unsigned char>(pending_[i]);
    const Lead lead = classify(c);
    if (lead.length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    // Count the bytes after the lead that still fit a well-formed sequence.
    int good = 1;
    while (good < lead.length && i + good < pending_.size()) {
      const auto b = static_cast<unsigned char>(pending_[i + good]);
      const unsigned char low = good == 1 ? lead.low : 0x80;
      const unsigned char high = good == 1 ? lead.high : 0xBF;
      if (b < low || b > high) break;
      ++good;
    }
    if (good == lead.length) {
      out.append(pending_, i, good);
      i += good;
    } else if (i + good == pending_.size() && !at_end) {
      break;  // a prefix that later bytes may complete: hold it back
    } else {
      out += kReplacement;  // the maximal subpart that cannot be completed
      i += good;
    }
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace shoal
