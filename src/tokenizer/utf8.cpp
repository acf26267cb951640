#include "tokenizer/utf8.h"

namespace shoal {
namespace {

// Reads one code point at `i`, returning its length in bytes; U+FFFD with
// length 1 where no valid sequence starts (llama.cpp's unicode_cpt_from_utf8).
size_t read_code_point(std::string_view text, size_t i, uint32_t& cp) {
  const auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(text[k])); };
  const auto continuation = [&](size_t k) { return k < text.size() && (byte(k) & 0xC0) == 0x80; };
  const uint32_t c = byte(i);
  cp = 0xFFFD;
  size_t length = 1;
  if (c < 0x80) {
    cp = c;
  } else if ((c & 0x40) == 0) {
    // a stray continuation byte
  } else if ((c & 0x20) == 0) {
    if (continuation(i + 1)) {
      cp = ((c & 0x1F) << 6) | (byte(i + 1) & 0x3F);
      length = 2;
    }
  } else if ((c & 0x10) == 0) {
    if (continuation(i + 1) && continuation(i + 2)) {
      cp = ((c & 0x0F) << 12) | ((byte(i + 1) & 0x3F) << 6) | (byte(i + 2) & 0x3F);
      length = 3;
    }
  } else if ((c & 0x08) == 0) {
    if (continuation(i + 1) && continuation(i + 2) && continuation(i + 3)) {
      cp = ((c & 0x07) << 18) | ((byte(i + 1) & 0x3F) << 12) | ((byte(i + 2) & 0x3F) << 6) | (byte(i + 3) & 0x3F);
      length = 4;
    }
  }
  if (cp > 0x10FFFF) cp = 0xFFFD;  // llama.cpp cannot re-encode these either
  return length;
}

}  // namespace

std::vector<uint32_t> decode_utf8_lenient(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    i += read_code_point(text, i, cp);
    cps.push_back(cp);
  }
  return cps;
}

void canonicalize_utf8(std::string_view text, std::string& canonical, std::string& regex_safe) {
  canonical.clear();
  regex_safe.clear();
  canonical.reserve(text.size());
  regex_safe.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    i += read_code_point(text, i, cp);
    append_utf8(cp, canonical);
    append_utf8(cp >= 0xD800 && cp <= 0xDFFF ? 0xFFFD : cp, regex_safe);
  }
}

}  // namespace shoal
