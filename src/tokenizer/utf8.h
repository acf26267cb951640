#pragma once
// UTF-8 helpers with llama.cpp's exact leniency: its tokenizers read text
// through unicode_cpts_from_utf8, which turns each byte that starts no valid
// sequence into U+FFFD and accepts overlong forms and surrogates. Matching
// token ids means reading text the same way.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/utf8_append.h"

namespace shoal {

// Bytes in the sequence a lead byte announces; 1 for a continuation byte,
// 4 for 0xF8..0xFF (llama.cpp's unicode_len_utf8).
inline size_t utf8_sequence_length(unsigned char lead) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[lead >> 4];
}

// Code points of `text`, read leniently as described above.
std::vector<uint32_t> decode_utf8_lenient(std::string_view text);

// Re-encodes `text` after a lenient read. `regex_safe` gets the same text with
// every code point PCRE2 would reject (surrogates) replaced by U+FFFD: byte
// for byte the same length, so offsets found in it apply to `canonical`.
void canonicalize_utf8(std::string_view text, std::string& canonical, std::string& regex_safe);

}  // namespace shoal
