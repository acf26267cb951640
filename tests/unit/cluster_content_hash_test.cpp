// Content hashes are SHA-256: the digest sha256sum prints, and only that
// spelling parses back (an XXH3-era 32-digit name does not).
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "cluster/content_hash.h"
#include "util/error.h"

namespace shoal {
namespace {

TEST(ContentHash, IsSha256) {
  EXPECT_EQ(hash_bytes("abc", 3).hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hash_bytes("", 0).hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // More than one SHA block, at an odd length.
  std::string long_input(1000, 'x');
  EXPECT_EQ(hash_bytes(long_input.data(), long_input.size()).hex(),
            "44f8354494a5ba03ba1792a8d3e9c534c47a9181980fde7a3f44b06ef2ae7c7f");
}

TEST(ContentHash, HexRoundTripsAndRefusesOtherSpellings) {
  ContentHash h = hash_bytes("tensor", 6);
  EXPECT_EQ(ContentHash::from_hex(h.hex()), h);
  EXPECT_NE(hash_bytes("tensos", 6), h);
  std::string upper = h.hex();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_THROW(ContentHash::from_hex(upper), Error);
  EXPECT_THROW(ContentHash::from_hex(h.hex().substr(0, 32)), Error);  // an XXH3-128 name
  EXPECT_THROW(ContentHash::from_hex(h.hex() + "0"), Error);
  EXPECT_THROW(ContentHash::from_hex(std::string(63, '0') + "g"), Error);
}

}  // namespace
}  // namespace shoal
