#include "cluster/wire/frame_cipher.h"

#include <cstring>

#include "util/error.h"

namespace shoal::wire {
namespace {

void iv_for(uint64_t seq, uint8_t iv[12]) {
  // Four zero bytes, then the frame's number in little-endian order, written
  // byte by byte so both ends agree whatever their own byte order: unique per
  // direction, so a key never sees a nonce twice.
  std::memset(iv, 0, 12);
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<uint8_t>(seq >> (8 * i));
}

EVP_CIPHER_CTX* context(const uint8_t key[kKeyBytes], bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (!ctx) fail("out of memory for a cipher context");
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nullptr)
                         : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    fail("cannot set up AES-256-GCM");
  }
  return ctx;
}

}  // namespace

FrameCipher::FrameCipher(const uint8_t send_key[kKeyBytes], const uint8_t recv_key[kKeyBytes])
    : seal_ctx_(context(send_key, true)), open_ctx_(context(recv_key, false)) {}

FrameCipher::~FrameCipher() {
  EVP_CIPHER_CTX_free(seal_ctx_);
  EVP_CIPHER_CTX_free(open_ctx_);
}

void FrameCipher::seal(const uint8_t header[kHeaderBytes], std::span<const std::span<const uint8_t>> parts,
                       std::vector<uint8_t>& out) {
  size_t n = 0;
  for (const auto& p : parts) n += p.size();
  out.resize(n + kTagBytes);
  uint8_t iv[12];
  iv_for(sent_++, iv);
  int len = 0;
  bool ok = EVP_EncryptInit_ex(seal_ctx_, nullptr, nullptr, nullptr, iv) == 1 &&
            EVP_EncryptUpdate(seal_ctx_, nullptr, &len, header, static_cast<int>(kHeaderBytes)) == 1;
  size_t at = 0;
  for (const auto& p : parts) {
    if (!ok || p.empty()) continue;
    ok = EVP_EncryptUpdate(seal_ctx_, out.data() + at, &len, p.data(), static_cast<int>(p.size())) == 1;
    at += static_cast<size_t>(len);
  }
  ok = ok && EVP_EncryptFinal_ex(seal_ctx_, out.data() + at, &len) == 1 &&
       EVP_CIPHER_CTX_ctrl(seal_ctx_, EVP_CTRL_GCM_GET_TAG, kTagBytes, out.data() + n) == 1;
  if (!ok) fail("AES-256-GCM encryption failed");
}

bool FrameCipher::open(const uint8_t header[kHeaderBytes], std::vector<uint8_t>& payload) {
  if (payload.size() < kTagBytes) return false;
  const size_t n = payload.size() - kTagBytes;
  uint8_t iv[12];
  iv_for(received_, iv);
  int len = 0;
  bool ok = EVP_DecryptInit_ex(open_ctx_, nullptr, nullptr, nullptr, iv) == 1 &&
            EVP_DecryptUpdate(open_ctx_, nullptr, &len, header, static_cast<int>(kHeaderBytes)) == 1 &&
            (n == 0 || EVP_DecryptUpdate(open_ctx_, payload.data(), &len, payload.data(), static_cast<int>(n)) == 1) &&
            EVP_CIPHER_CTX_ctrl(open_ctx_, EVP_CTRL_GCM_SET_TAG, kTagBytes, payload.data() + n) == 1 &&
            EVP_DecryptFinal_ex(open_ctx_, payload.data() + n, &len) == 1;
  if (!ok) return false;
  ++received_;
  payload.resize(n);
  return true;
}

}  // namespace shoal::wire
