#include "cluster/wire/handshake.h"

#include <openssl/crypto.h>
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

// One direction's frame key: HMAC-SHA256(cluster key, label | both nonces),
// fresh for every connection since both nonces are.
void session_key(const std::string& key, const char* direction, const std::string& client_nonce,
                 const std::string& worker_nonce, uint8_t out[kKeyBytes]) {
  const auto mac =
      hmac_sha256(key, std::string("shoal frame key|") + direction + "|" + client_nonce + "|" + worker_nonce);
  std::copy(mac.begin(), mac.end(), out);
}

// Frames after the handshake: sealed with the key ("aead"), or plain for a
// trusted link (--insecure). The proofs cover the choice, so nobody on the
// path can talk the two sides down to plain frames.
const char* frame_mode(const std::optional<std::string>& key, bool insecure) {
  return key && !insecure ? "aead" : "plain";
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
                                const nlohmann::json& extra, bool insecure) {
  PreAuthLimit limit(conn);
  const std::string nonce = fresh_nonce();
  const std::string mode = frame_mode(key, insecure);
  nlohmann::json hello = extra.is_object() ? extra : nlohmann::json::object();
  hello["protocol"] = kProtocolVersion;
  hello["build"] = "shoal 0.1.0";
  hello["role"] = role_name(role);
  hello["nonce"] = nonce;
  hello["frames"] = mode;
  conn.send_json(MessageType::Hello, 0, hello);
  nlohmann::json reply = conn.expect_json(MessageType::Hello, kHandshakeTimeoutMs);
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
  conn.send_json(MessageType::Auth, 0, {{"proof", proof(*key, "client", worker_nonce, nonce + "|" + mode)}});
  nlohmann::json ok = conn.expect_json(MessageType::AuthOk, kHandshakeTimeoutMs);
  if (!same_proof(ok.value("proof", std::string()), proof(*key, "worker", nonce, worker_nonce + "|" + mode)))
    throw ProtocolError(ErrorCode::AuthFailed, fmt::format("{} failed to prove it holds the cluster key", conn.peer()));
  if (mode == std::string("aead")) {
    uint8_t send[kKeyBytes], recv[kKeyBytes];
    session_key(*key, "to-worker", nonce, worker_nonce, send);
    session_key(*key, "to-client", nonce, worker_nonce, recv);
    conn.encrypt(send, recv);
  }
  return reply;
}

nlohmann::json server_handshake(Connection& conn, const std::optional<std::string>& key, const nlohmann::json& info,
                                int timeout_ms, bool insecure) {
  PreAuthLimit limit(conn);
  // One deadline for the whole handshake: a stranger trickling bytes cannot
  // hold a connection longer than this.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto left = [&] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count()));
  };
  Frame frame;
  conn.receive(frame, left());
  if (frame.type() != MessageType::Hello) {
    conn.send_error(ErrorCode::Malformed, "expected HELLO first");
    throw ProtocolError(ErrorCode::Malformed,
                        fmt::format("{} sent {} before HELLO", conn.peer(), message_name(frame.type())));
  }
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
  conn.send_json(MessageType::Hello, 0, hello);
  if (!key) return client;
  conn.receive(frame, left());
  if (frame.type() != MessageType::Auth) {
    conn.send_error(ErrorCode::AuthRequired, "this worker requires a cluster key (--key-file or SHOAL_CLUSTER_KEY)");
    throw ProtocolError(ErrorCode::AuthRequired, fmt::format("{} did not authenticate", conn.peer()));
  }
  nlohmann::json auth = parse_json(frame);
  if (!auth.contains("proof") || !auth["proof"].is_string() ||
      !same_proof(auth["proof"].get<std::string>(), proof(*key, "client", nonce, client_nonce + "|" + mode))) {
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
  conn.send_json(MessageType::AuthOk, 0, {{"proof", proof(*key, "worker", client_nonce, nonce + "|" + mode)}});
  if (mode == std::string("aead")) {
    uint8_t send[kKeyBytes], recv[kKeyBytes];
    session_key(*key, "to-client", client_nonce, nonce, send);
    session_key(*key, "to-worker", client_nonce, nonce, recv);
    conn.encrypt(send, recv);
  }
  return client;
}

}  // namespace shoal::wire
