#include "util/printable.h"

#include <fmt/format.h>

namespace shoal {

namespace {

// The length of the valid UTF-8 sequence at text[i], or 0 if there is none
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t utf8_length(std::string_view text, size_t i, char32_t& code) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b = byte(i);
  size_t n = 0;
  if (b < 0x80) return code = b, 1;
  if (b >= 0xC2 && b <= 0xDF) n = 2, code = b & 0x1F;
  else if (b >= 0xE0 && b <= 0xEF) n = 3, code = b & 0x0F;
  else if (b >= 0xF0 && b <= 0xF4) n = 4, code = b & 0x07;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  const char32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < smallest[n] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view text, bool keep_layout) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t code = 0;
    const size_t n = utf8_length(text, i, code);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for this byte; resynchronise at the next
      ++i;
      continue;
    }
    if (keep_layout && (code == '\n' || code == '\t')) out += static_cast<char>(code);
    else if (code < 0x20 || code == 0x7F) out += fmt::format("\\x{:02x}", static_cast<unsigned>(code));
    else if (code >= 0x80 && code <= 0x9F) out += fmt::format("\\u{:04x}", static_cast<unsigned>(code));
    else out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

bool is_printable(std::string_view text) { return printable(text) == text; }

}  // namespace shoal
