#pragma once
// The cluster key (docs/protocol.md, "Cluster keys"). Beacons and handshake
// proofs are HMACs under it in the clear, so a listener can test guesses
// offline: only a full-strength key is accepted, 32 random bytes as 64 hex
// characters (`shoal keygen`), or one stretched from a passphrase with
// Argon2id. Either way the key is those 64 lowercase hex characters.
#include <optional>
#include <string>

namespace shoal::wire {

inline constexpr int kClusterKeyBytes = 32;
inline constexpr size_t kMinPassphraseChars = 12;

// The cluster key: from --key-file, else SHOAL_CLUSTER_KEY, else none.
// Throws shoal::Error for an unreadable file or a key that is not 64 hex
// characters of random-looking bytes; the message says how to make one.
std::optional<std::string> load_cluster_key(const std::string& key_file);

// As above, with --key-passphrase-file and SHOAL_CLUSTER_PASSPHRASE as well.
// Explicit files win over the environment; two sources at one level fail.
std::optional<std::string> load_cluster_key(const std::string& key_file, const std::string& passphrase_file);

// The checks alone: text as a key file holds it (a trailing newline is
// allowed); `source` names it in the error.
std::string parse_cluster_key(const std::string& text, const std::string& source);

// Argon2id(passphrase) with the fixed parameters and salt, as hex. Throws
// shoal::Error for a passphrase under kMinPassphraseChars.
std::string derive_cluster_key(const std::string& passphrase);

// 32 fresh bytes from the OpenSSL generator, as hex.
std::string generate_cluster_key();

}  // namespace shoal::wire
