#pragma once
// GPT-2's byte-level alphabet: every byte gets a printable character, so BPE
// vocabularies store arbitrary bytes as text. Printable Latin-1 bytes stand
// for themselves; the other 68 bytes map to U+0100 and up, in byte order.
#include <cstdint>
#include <string>
#include <string_view>

namespace shoal {

// The UTF-8 text of the character that stands for `byte`.
const std::string& byte_level_char(uint8_t byte);

// Bytes of a byte-level token text. A character outside the alphabet becomes
// "[UNK_BYTE_0x..<text>]", exactly as llama.cpp's llama_decode_text writes it.
std::string byte_level_decode(std::string_view text);

}  // namespace shoal
