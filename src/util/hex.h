#pragma once
// Bytes as lowercase hex digits: nonces, MACs, content hashes and ids on the
// wire and in file names, one spelling each.
#include <cstddef>
#include <cstdint>
#include <string>

namespace shoal {

inline std::string to_hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

}  // namespace shoal
