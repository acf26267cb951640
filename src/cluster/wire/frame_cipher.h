#pragma once
// Authenticated encryption of every frame after the handshake: AES-256-GCM,
// one key per direction (derived from the cluster key and both handshake
// nonces), the frame header as associated data, and an implicit 64-bit
// sequence number as the nonce. So a flipped bit, a replayed, dropped,
// reordered or injected frame fails the tag, and activations (which reveal
// the prompt) and weights cross encrypted.
#include <openssl/evp.h>

#include <cstdint>
#include <span>
#include <vector>

#include "cluster/wire/protocol.h"

namespace shoal::wire {

constexpr size_t kKeyBytes = 32;
constexpr size_t kTagBytes = 16;

class FrameCipher {
 public:
  FrameCipher(const uint8_t send_key[kKeyBytes], const uint8_t recv_key[kKeyBytes]);
  ~FrameCipher();
  FrameCipher(const FrameCipher&) = delete;
  FrameCipher& operator=(const FrameCipher&) = delete;

  // The payload parts encrypted into `out` (ciphertext then tag), sealed
  // with `header` (whose payload_bytes already counts the tag).
  void seal(const uint8_t header[kHeaderBytes], std::span<const std::span<const uint8_t>> parts,
            std::vector<uint8_t>& out);
  // Decrypts `payload` (ciphertext then tag) in place and drops the tag;
  // false when the tag does not verify (then nothing is to be trusted).
  bool open(const uint8_t header[kHeaderBytes], std::vector<uint8_t>& payload);

 private:
  EVP_CIPHER_CTX* seal_ctx_;
  EVP_CIPHER_CTX* open_ctx_;
  uint64_t sent_ = 0;      // frames sealed: the next one's sequence number
  uint64_t received_ = 0;  // frames opened
};

}  // namespace shoal::wire
