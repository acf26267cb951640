#include "tokenizer/byte_level.h"

#include <fmt/format.h>

#include <array>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace shoal {
namespace {

bool stands_for_itself(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

struct Alphabet {
  std::array<std::string, 256> chars;
  std::unordered_map<uint32_t, uint8_t> bytes;  // code point -> byte

  Alphabet() {
    uint32_t shifted = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = stands_for_itself(b) ? static_cast<uint32_t>(b) : shifted++;
      append_utf8(cp, chars[b]);
      bytes[cp] = static_cast<uint8_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::string& byte_level_char(uint8_t byte) { return alphabet().chars[byte]; }

std::string byte_level_decode(std::string_view text) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(text.size());
  for (const uint32_t cp : decode_utf8_lenient(text)) {
    auto it = a.bytes.find(cp);
    if (it != a.bytes.end()) {
      out += static_cast<char>(it->second);
      continue;
    }
    std::string utf8;
    append_utf8(cp, utf8);
    out += "[UNK_BYTE_0x";
    for (const char c : utf8) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
    out += text;
    out += "]";
  }
  return out;
}

}  // namespace shoal
