#pragma once
// The first exchange on every connection: HELLO both ways (protocol
// version, build, role, device, a fresh nonce), then, when the worker has a
// cluster key, mutual HMAC-SHA256 challenge-response over both nonces and
// the frame mode, and each side's MAC over the transcript (both HELLOs as
// they crossed), so a HELLO altered on the way fails the handshake; then,
// unless --insecure, per-direction session keys from the key and the
// transcript seal every frame. Neither side learns the key; a replayed
// proof fails on the fresh nonce. No HEARTBEAT is taken before AUTH_OK.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "cluster/wire/connection.h"

namespace shoal::wire {

enum class Role { Primary, Worker, Peer };  // Peer: a worker forwarding to the next in a chain
const char* role_name(Role role);

// Client side (primary or peer). Returns the worker's HELLO. Throws
// ProtocolError with a clear message: version mismatch, busy, the worker
// wants a key we lack, wrong key, a worker without a key while we have one.
// With a key, every later frame is encrypted and authenticated
// (frame_cipher.h) unless `insecure` (a trusted link: plain frames); both
// sides must agree, and the proofs cover the choice.
// The whole handshake must be over within timeout_ms (--worker-timeout):
// a peer that stalls or sends only HEARTBEATs fails it at that deadline.
nlohmann::json client_handshake(Connection& conn, Role role, const std::optional<std::string>& key,
                                const nlohmann::json& extra = {}, bool insecure = false,
                                int timeout_ms = kHandshakeTimeoutMs);

// Server side (worker). `hello` is what the worker tells about itself.
// Returns the client's HELLO (with its "role"). Throws ProtocolError after
// telling the client why.
// The whole handshake must be over within timeout_ms.
nlohmann::json server_handshake(Connection& conn, const std::optional<std::string>& key, const nlohmann::json& hello,
                                int timeout_ms = kHandshakeTimeoutMs, bool insecure = false);

}  // namespace shoal::wire
