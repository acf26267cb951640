#include "tokenizer/spm_tokenizer.h"

#include <optional>

#include "tokenizer/pair_merge.h"
#include "util/error.h"

namespace shoal {

void SpmTokenizer::encode(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  // A pair merges when together they spell a token; higher scores first.
  const auto score = [&](std::string_view, std::string_view, std::string_view both) -> std::optional<double> {
    const TokenId id = vocab_.find_or_none(both);
    if (id == kNoToken) return std::nullopt;
    return vocab_.token(id).score;
  };
  // Every surviving symbol is a single character or a merge that was a token,
  // so it is a token or falls back to one token per byte.
  merge_pairs(text, score, [&](std::string_view piece) {
    const TokenId id = vocab_.find_or_none(piece);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
    for (const char c : piece) {
      TokenId byte = vocab_.byte_to_token(static_cast<uint8_t>(c));
      // llama.cpp throws here; a vocabulary without byte tokens gets <unk>.
      if (byte == kNoToken) byte = vocab_.unk();
      if (byte == kNoToken) fail("SPM vocabulary has neither a token for byte 0x{:02X} nor an unknown token",
                                 static_cast<unsigned char>(c));
      out.push_back(byte);
    }
  });
}

}  // namespace shoal
