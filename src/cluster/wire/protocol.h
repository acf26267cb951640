#pragma once
// The wire protocol between the primary and its workers (docs/protocol.md is
// the specification). Every frame is a fixed 32-byte little-endian header and
// a payload. Control messages carry a JSON object; the hot path (FORWARD,
// tensor data) is binary.
#include <cstdint>
#include <string>

#include "util/error.h"

namespace shoal::wire {

constexpr uint32_t kMagic = 0x4C4F4853;  // "SHOL" little-endian
constexpr uint16_t kProtocolVersion = 15;  // v2: HEARTBEAT, deadlines; v3: AEAD frames after a keyed handshake;
                                          // v4: LOAD_STAGE describes the block by its tensors and settings;
                                          // v5: LOAD_STAGE names the KV cache types;
                                          // v6: the handshake transcript is authenticated;
                                          // v7: content names are SHA-256;
                                          // v8: LOAD_STAGE gives each layer's kind (attention or DeltaNet)
                                          // v9: LOAD_STAGE gives latent attention, leading dense layers, the router
                                          // v10: tensor groups (LOAD_STAGE's group, TENSOR_LINK, TENSOR_SHARE)
                                          // v11: GROUP_LINK (a group links at load), group weights, the head on a stage
                                          // v12: a tensor group divides attention by heads (each member's KV heads)
                                          // v13: whole-projection Q/K norms, interleaved DeltaNet keys, ssm_ba
                                          // v14: windowed layers' own geometry and global tensors, the V norm,
                                          //      the router's input scale (gemma4)
                                          // v15: CACHE_READ, CACHE_ROWS, CACHE_WRITE, CACHE_COPY (a prompt's cache moves)
constexpr size_t kHeaderBytes = 32;
constexpr uint64_t kDefaultMaxPayload = 256ull << 20;  // refused before any allocation
constexpr int kHandshakeTimeoutMs = 5000;
// Until AUTH_OK a frame is at most this big (HELLO, AUTH, ERROR are small):
// an unauthenticated peer cannot make the worker allocate.
constexpr uint64_t kPreAuthMaxPayload = 4096;
// --worker-timeout's default: a peer silent this long is lost.
constexpr int kDefaultPeerTimeoutMs = 5000;

enum class MessageType : uint16_t {
  Hello = 1,         // JSON, both ways, first
  Auth = 2,          // JSON: primary's HMAC proof
  AuthOk = 3,        // JSON: worker's HMAC proof
  Error = 4,         // JSON {code, message}; the sender closes after a fatal one
  Ping = 5,          // JSON {t}
  Pong = 6,
  Stats = 7,         // JSON request / reply
  StatsReply = 8,
  LoadStage = 9,     // JSON: config, layer range, tensor list with content hashes
  LoadNeeds = 10,    // JSON: which tensors the worker still needs
  TensorData = 11,   // binary: one chunk of one tensor
  LoadCommit = 12,   // JSON: all chunks sent
  StageReady = 13,   // JSON: stage id, memory, sources
  Forward = 14,      // binary: batch metadata + activations (+ chain route)
  ForwardResult = 15,// binary: activations
  KvOp = 16,         // JSON {stage, op, seq, ...}
  KvOk = 17,
  Unload = 18,       // JSON {stage}
  UnloadOk = 19,
  LoadProgress = 20, // JSON: bytes received so far (worker → primary, informational)
  Heartbeat = 21,    // empty, both ways: "still here" on an idle or busy link; never answered
  LinkProbe = 22,    // binary: any bytes, from the primary (workers with the "link-probe" capability)
  LinkProbeEcho = 23,// binary: the same bytes back, to time the link
  Probe = 24,        // JSON {type, cols, matrices}: time the model's matrices and a matmul (capability "probe")
  ProbeResult = 25,  // JSON {type, matvec_gbps, matmul_gflops}
  TensorLink = 26,   // JSON {group, rank}: a tensor group member's link to another (peer → peer, first)
  TensorShare = 27,  // binary: one member's rows of one matmul group, f32 (peer → peer)
  GroupLink = 28,    // JSON {stage}: link to every other member of the stage's tensor group now (primary → member)
  GroupLinked = 29,  // JSON {stage, ms}: linked both ways with every other member
  CacheRead = 30,    // JSON {stage, seq, layer}: a sequence's cache of one layer (primary → worker)
  CacheRows = 31,    // binary: u32 length, then the layer's cache bytes
  CacheWrite = 32,   // binary: u32 stage, seq, layer, length, then the layer's cache bytes; KV_OK
  CacheCopy = 33,    // JSON {from, to, seq, layer}: one stage's cache of a layer into another's, on the worker; KV_OK
  COUNT
};

const char* message_name(MessageType type);

enum class ErrorCode : uint16_t {
  VersionMismatch = 1,
  AuthRequired = 2,
  AuthFailed = 3,
  Busy = 4,
  FrameTooLarge = 5,
  Malformed = 6,
  UnknownStage = 7,
  OutOfMemory = 8,
  HashMismatch = 9,
  BadRequest = 10,
  Internal = 11,
  Timeout = 12,      // the peer was silent past the deadline
  TooManyConnections = 13,
  Integrity = 14,    // a frame failed its authentication tag: altered, replayed, dropped or injected
};

struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t flags = 0;
  uint32_t reserved = 0;
  uint64_t request_id = 0;
  uint64_t payload_bytes = 0;
};

void encode_header(const FrameHeader& h, uint8_t out[kHeaderBytes]);
FrameHeader decode_header(const uint8_t in[kHeaderBytes]);

// A protocol violation or an error reported by the peer.
class ProtocolError : public Error {
 public:
  ProtocolError(ErrorCode code, const std::string& message) : Error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace shoal::wire
