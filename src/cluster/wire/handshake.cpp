#include "cluster/wire/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cluster/wire/keyed_hash.h"

namespace shoal::wire {
namespace {

constexpr int kNonceBytes = 32;

std::string fresh_nonce() {
  unsigned char buf[kNonceBytes];
  if (RAND_bytes(buf, kNonceBytes) != 1) fail("cannot draw a random nonce");
  return to_hex(buf, kNonceBytes);
}

// HMAC-SHA256(key, label | first nonce | second nonce), hex. The label
// binds the proof to its direction so one side's proof is never valid for
// the other.
std::string proof(const std::string& key, const char* label, const std::string& a, const std::string& b) {
  return hmac_sha256_hex(key, std::string(label) + "|" + a + "|" + b);
}

// The transcript: both HELLOs exactly as they crossed the wire, each behind
// its length, hashed with SHA-256. The nonces, roles, device reports,
// capabilities and frame mode are all in it, so a HELLO changed on the way
// gives the two sides different transcripts.
std::string transcript_hash(const std::string& client_hello, const std::string& worker_hello) {
  const std::string text = fmt::format("shoal handshake|{}|{}|{}|{}", client_hello.size(), client_hello,
                                       worker_hello.size(), worker_hello);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(text.data(), text.size(), md, &n, EVP_sha256(), nullptr) != 1) fail("cannot hash the handshake");
  return to_hex(md, n);
}

// Each side's MAC over the transcript: proves to the other that both saw
// the same HELLOs. Kept apart from the key proof so a failure can say which:
// a wrong key, or HELLOs altered on the way.
std::string transcript_mac(const std::string& key, const char* label, const std::string& transcript) {
  return hmac_sha256_hex(key, std::string("shoal transcript|") + label + "|" + transcript);
}

// One direction's frame key: HMAC-SHA256(cluster key, label | transcript),
// fresh for every connection since the transcript holds both nonces.
void session_key(const std::string& key, const char* direction, const std::string& transcript, uint8_t out[kKeyBytes]) {
  auto mac = hmac_sha256(key, std::string("shoal frame key|") + direction + "|" + transcript);
  std::copy(mac.begin(), mac.end(), out);
  OPENSSL_cleanse(mac.data(), mac.size());
}

// Seals the connection with the two directions' keys and wipes them here.
void seal(Connection& conn, const std::string& key, const std::string& transcript, bool client) {
  uint8_t send[kKeyBytes], recv[kKeyBytes];
  session_key(key, client ? "to-worker" : "to-client", transcript, send);
  session_key(key, client ? "to-client" : "to-worker", transcript, recv);
  conn.encrypt(send, recv);
  OPENSSL_cleanse(send, sizeof(send));
  OPENSSL_cleanse(recv, sizeof(recv));
}

// Sends a HELLO and returns its bytes as they went out (the transcript's).
std::string send_hello(Connection& conn, const nlohmann::json& hello) {
  const std::string text = hello.dump();
  const std::span<const uint8_t> part(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  conn.send(MessageType::Hello, 0, std::span(&part, 1));
  return text;
}

std::chrono::steady_clock::time_point deadline_in(int timeout_ms) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(1, timeout_ms));
}

// Frames after the handshake: sealed with the key ("aead"), or plain for a
// trusted link (--insecure). The proofs cover the choice, so nobody on the
// path can talk the two sides down to plain frames.
const char* frame_mode(const std::optional<std::string>& key, bool insecure) {
  return key && !insecure ? "aead" : "plain";
}

// A string field of an AUTH or AUTH_OK, or "" (then no proof matches).
std::string text_of(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool same_proof(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) throw ProtocolError(ErrorCode::Malformed, fmt::format("HELLO lacks '{}'", name));
  return it->get<std::string>();
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::Primary: return "primary";
    case Role::Worker: return "worker";
    case Role::Peer: return "peer";
  }
  return "?";
}

namespace {
// Until the handshake is over, frames are small; the caller's limit returns after.
class PreAuthLimit {
 public:
  explicit PreAuthLimit(Connection& conn) : conn_(conn), saved_(conn.max_payload()) {
    conn_.set_max_payload(kPreAuthMaxPayload);
  }
  ~PreAuthLimit() { conn_.set_max_payload(saved_); }

 private:
  Connection& conn_;
  uint64_t saved_;
};
}  // namespace

nlohmann::json client_handshake(Connection& conn, Role role, const std::optional<std::string>& key,
                                const nlohmann::json& extra, bool insecure, int timeout_ms) {
  PreAuthLimit limit(conn);
  // One deadline for the whole handshake; no HEARTBEAT moves it (receive_by).
  const auto deadline = deadline_in(timeout_ms);
  const std::string nonce = fresh_nonce();
  const std::string mode = frame_mode(key, insecure);
  nlohmann::json hello = extra.is_object() ? extra : nlohmann::json::object();
  hello["protocol"] = kProtocolVersion;
  hello["build"] = "shoal 0.1.0";
  hello["role"] = role_name(role);
  hello["nonce"] = nonce;
  hello["frames"] = mode;
  const std::string client_text = send_hello(conn, hello);
  Frame frame;
  conn.receive_by(frame, deadline);
  conn.check(frame, MessageType::Hello);
  const std::string worker_text(frame.payload.begin(), frame.payload.end());
  nlohmann::json reply = parse_json(frame);
  const std::string worker_nonce = field(reply, "nonce");
  const bool wants_key = reply.value("auth", false);
  if (!wants_key) {
    if (key)
      throw ProtocolError(ErrorCode::AuthFailed,
                          fmt::format("{} runs without a cluster key but we have one: refusing an unauthenticated "
                                      "worker (start it with the same --key-file)",
                                      conn.peer()));
    return reply;
  }
  if (!key)
    throw ProtocolError(ErrorCode::AuthRequired,
                        fmt::format("{} requires a cluster key: pass --key-file or set SHOAL_CLUSTER_KEY", conn.peer()));
  const std::string worker_mode = reply.value("frames", std::string("?"));
  if (worker_mode != mode)
    throw ProtocolError(ErrorCode::AuthFailed,
                        fmt::format("{} sends {} frames but this side {}: start both with --insecure (trusted "
                                    "network, plain frames) or both without (encrypted)",
                                    conn.peer(), worker_mode, mode == "aead" ? "encrypts them" : "sends plain ones"));
  const std::string transcript = transcript_hash(client_text, worker_text);
  conn.send_json(MessageType::Auth, 0,
                 {{"proof", proof(*key, "client", worker_nonce, nonce + "|" + mode)},
                  {"transcript", transcript_mac(*key, "client", transcript)}});
  conn.receive_by(frame, deadline);
  conn.check(frame, MessageType::AuthOk);
  const nlohmann::json ok = parse_json(frame);
  if (!same_proof(text_of(ok, "proof"), proof(*key, "worker", nonce, worker_nonce + "|" + mode)))
    throw ProtocolError(ErrorCode::AuthFailed, fmt::format("{} failed to prove it holds the cluster key", conn.peer()));
  if (!same_proof(text_of(ok, "transcript"), transcript_mac(*key, "worker", transcript)))
    throw ProtocolError(ErrorCode::Integrity,
                        fmt::format("handshake integrity check failed with {}: the HELLO messages were altered on the "
                                    "way (the two sides saw different transcripts); the connection is closed",
                                    conn.peer()));
  if (mode == std::string("aead")) seal(conn, *key, transcript, true);
  return reply;
}

nlohmann::json server_handshake(Connection& conn, const std::optional<std::string>& key, const nlohmann::json& info,
                                int timeout_ms, bool insecure) {
  PreAuthLimit limit(conn);
  // One deadline for the whole handshake: a stranger trickling bytes or
  // sending HEARTBEATs cannot hold a connection longer than this.
  const auto deadline = deadline_in(timeout_ms);
  Frame frame;
  conn.receive_by(frame, deadline);
  if (frame.type() != MessageType::Hello) {
    conn.send_error(ErrorCode::Malformed, "expected HELLO first");
    throw ProtocolError(ErrorCode::Malformed,
                        fmt::format("{} sent {} before HELLO", conn.peer(), message_name(frame.type())));
  }
  const std::string client_text(frame.payload.begin(), frame.payload.end());
  nlohmann::json client = parse_json(frame);
  const std::string client_nonce = field(client, "nonce");
  const std::string role = field(client, "role");
  if (role != "primary" && role != "peer") {
    conn.send_error(ErrorCode::Malformed, "unknown role");
    throw ProtocolError(ErrorCode::Malformed, fmt::format("{} claims unknown role '{}'", conn.peer(), role));
  }
  const std::string nonce = fresh_nonce();
  nlohmann::json hello = info;
  hello["protocol"] = kProtocolVersion;
  hello["build"] = "shoal 0.1.0";
  hello["role"] = "worker";
  hello["nonce"] = nonce;
  hello["auth"] = key.has_value();
  const std::string mode = frame_mode(key, insecure);
  hello["frames"] = mode;
  const std::string worker_text = send_hello(conn, hello);
  if (!key) return client;
  conn.receive_by(frame, deadline);
  if (frame.type() != MessageType::Auth) {
    conn.send_error(ErrorCode::AuthRequired, "this worker requires a cluster key (--key-file or SHOAL_CLUSTER_KEY)");
    throw ProtocolError(ErrorCode::AuthRequired, fmt::format("{} did not authenticate", conn.peer()));
  }
  nlohmann::json auth = parse_json(frame);
  if (!same_proof(text_of(auth, "proof"), proof(*key, "client", nonce, client_nonce + "|" + mode))) {
    // A client of the other frame mode fails here too; it has been told
    // the mode in HELLO, so the message can say which.
    const bool other_mode = client.value("frames", std::string()) != mode;
    conn.send_error(ErrorCode::AuthFailed, other_mode ? fmt::format("this worker sends {} frames; start both sides "
                                                                    "with --insecure or both without", mode)
                                                      : std::string("wrong cluster key"));
    throw ProtocolError(ErrorCode::AuthFailed, other_mode ? fmt::format("{} wants {} frames, this worker {}",
                                                                        conn.peer(), client.value("frames", "?"), mode)
                                                          : fmt::format("{} presented a wrong cluster key", conn.peer()));
  }
  const std::string transcript = transcript_hash(client_text, worker_text);
  if (!same_proof(text_of(auth, "transcript"), transcript_mac(*key, "client", transcript))) {
    conn.send_error(ErrorCode::Integrity, "handshake integrity check failed: the HELLO messages were altered on the "
                                          "way (the two sides saw different transcripts); the connection is closed");
    throw ProtocolError(ErrorCode::Integrity,
                        fmt::format("handshake integrity check failed with {}: the HELLO messages were altered on "
                                    "the way", conn.peer()));
  }
  conn.send_json(MessageType::AuthOk, 0,
                 {{"proof", proof(*key, "worker", client_nonce, nonce + "|" + mode)},
                  {"transcript", transcript_mac(*key, "worker", transcript)}});
  if (mode == std::string("aead")) seal(conn, *key, transcript, false);
  return client;
}

}  // namespace shoal::wire
