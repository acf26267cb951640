#include "cluster/wire/cluster_key.h"

#include <argon2.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cluster/wire/keyed_hash.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal::wire {
namespace {

// Argon2id, fixed so that every machine derives the same key from the same
// passphrase without talking: RFC 9106's second recommended option (64 MiB,
// t=3, p=1 lane). The salt is public and the same everywhere; it only keeps
// the passphrase's hash apart from other uses of Argon2.
constexpr uint32_t kArgonIterations = 3;
constexpr uint32_t kArgonMemoryKiB = 64 * 1024;
constexpr uint32_t kArgonLanes = 1;
constexpr char kArgonSalt[] = "shoal cluster key v1";

// 32 random bytes have ~30 distinct values; under 16 happens by chance with
// odds ~3e-17, so fewer means a pattern (zeros, a repeated word).
constexpr int kMinDistinctBytes = 16;

// A key or passphrase file is a line; more is a wrong path.
constexpr size_t kMaxSecretFileBytes = 4096;

const char* const kHowToMakeOne =
    "Make a key with `shoal keygen > cluster.key` (or `shoal keygen -o cluster.key`) and copy it to every machine, "
    "or use a passphrase of 12 or more characters (--key-passphrase-file FILE or SHOAL_CLUSTER_PASSPHRASE)";

// Wipes a secret held in a string when it leaves scope.
struct Wipe {
  std::string& s;
  ~Wipe() { OPENSSL_cleanse(s.data(), s.size()); }
};

// Reads a small secret file into a string allocated once (no stray copies on
// the heap), warning as ssh does when others may read it.
std::string read_secret_file(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read {} {}: {}", what, path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077))
    std::fprintf(stderr, "warning: %s %s can be read by other users (mode %03o): chmod 600 %s\n", what, path.c_str(),
                 static_cast<unsigned>(st.st_mode & 0777), path.c_str());
  std::array<char, kMaxSecretFileBytes + 1> buf;
  size_t n = 0;
  while (n < buf.size()) {
    const ssize_t got = ::read(fd, buf.data() + n, buf.size() - n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    n += static_cast<size_t>(got);
  }
  ::close(fd);
  std::string text(buf.data(), std::min(n, kMaxSecretFileBytes));
  OPENSSL_cleanse(buf.data(), buf.size());
  if (n > kMaxSecretFileBytes) {
    OPENSSL_cleanse(text.data(), text.size());
    fail("{} {} is over {} bytes: not a key or passphrase", what, path, kMaxSecretFileBytes);
  }
  return text;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string parse_cluster_key(const std::string& text, const std::string& source) {
  size_t len = text.size();
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ')) --len;
  if (len != 2 * kClusterKeyBytes)
    fail("{} does not hold a cluster key as `shoal keygen` writes it (32 random bytes as 64 hex characters; it has "
         "{} characters). {}",
         source, len, kHowToMakeOne);
  std::array<uint8_t, kClusterKeyBytes> bytes{};
  std::array<bool, 256> seen{};
  int distinct = 0;
  bool ok = true;
  for (int i = 0; i < kClusterKeyBytes; ++i) {
    const int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      ok = false;
      continue;
    }
    bytes[i] = static_cast<uint8_t>((hi << 4) | lo);
    if (!seen[bytes[i]]) ++distinct;
    seen[bytes[i]] = true;
  }
  std::string key = to_hex(bytes.data(), bytes.size());  // lowercase: both ends must agree byte for byte
  OPENSSL_cleanse(bytes.data(), bytes.size());
  OPENSSL_cleanse(seen.data(), seen.size());
  if (!ok || distinct < kMinDistinctBytes) {
    OPENSSL_cleanse(key.data(), key.size());
    fail("{} does not hold a random cluster key ({}). {}", source,
         ok ? "its bytes repeat a pattern" : "it is not hexadecimal", kHowToMakeOne);
  }
  return key;
}

std::string derive_cluster_key(const std::string& passphrase) {
  if (passphrase.size() < kMinPassphraseChars)
    fail("the cluster passphrase must be at least {} characters (it has {}); or use a key from `shoal keygen`",
         kMinPassphraseChars, passphrase.size());
  const auto start = std::chrono::steady_clock::now();
  std::array<uint8_t, kClusterKeyBytes> raw{};
  const int rc = argon2id_hash_raw(kArgonIterations, kArgonMemoryKiB, kArgonLanes, passphrase.data(),
                                   passphrase.size(), kArgonSalt, sizeof(kArgonSalt) - 1, raw.data(), raw.size());
  if (rc != ARGON2_OK) fail("cannot derive the cluster key from the passphrase: {}", argon2_error_message(rc));
  std::string key = to_hex(raw.data(), raw.size());
  OPENSSL_cleanse(raw.data(), raw.size());
  spdlog::debug("cluster key derived from the passphrase in {:.0f} ms (Argon2id t={} m={} MiB p={})",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                kArgonIterations, kArgonMemoryKiB / 1024, kArgonLanes);
  return key;
}

std::string generate_cluster_key() {
  std::array<uint8_t, kClusterKeyBytes> raw{};
  if (RAND_bytes(raw.data(), static_cast<int>(raw.size())) != 1) fail("cannot draw random bytes for a key");
  std::string key = to_hex(raw.data(), raw.size());
  OPENSSL_cleanse(raw.data(), raw.size());
  return key;
}

std::optional<std::string> load_cluster_key(const std::string& key_file) { return load_cluster_key(key_file, ""); }

std::optional<std::string> load_cluster_key(const std::string& key_file, const std::string& passphrase_file) {
  if (!key_file.empty() && !passphrase_file.empty())
    fail("--key-file and --key-passphrase-file each give the cluster key: pass one");
  if (!key_file.empty()) {
    std::string text = read_secret_file(key_file, "key file");
    Wipe wipe{text};
    return parse_cluster_key(text, "key file " + key_file);
  }
  if (!passphrase_file.empty()) {
    std::string text = read_secret_file(passphrase_file, "passphrase file");
    Wipe wipe{text};
    // The line's end is not part of the passphrase (echo adds one).
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    return derive_cluster_key(text);
  }
  const char* key_env = std::getenv("SHOAL_CLUSTER_KEY");
  const char* pass_env = std::getenv("SHOAL_CLUSTER_PASSPHRASE");
  if (key_env && pass_env) fail("SHOAL_CLUSTER_KEY and SHOAL_CLUSTER_PASSPHRASE are both set: set one");
  if (!key_env && !pass_env) return std::nullopt;
  std::string text = key_env ? key_env : pass_env;
  Wipe wipe{text};
  return key_env ? parse_cluster_key(text, "SHOAL_CLUSTER_KEY") : derive_cluster_key(text);
}

}  // namespace shoal::wire
