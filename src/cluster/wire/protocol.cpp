#include "cluster/wire/protocol.h"

#include <cstring>

namespace shoal::wire {

const char* message_name(MessageType type) {
  static const char* names[] = {"?",        "HELLO",       "AUTH",          "AUTH_OK",    "ERROR",
                                "PING",     "PONG",        "STATS",         "STATS_REPLY", "LOAD_STAGE",
                                "LOAD_NEEDS", "TENSOR_DATA", "LOAD_COMMIT", "STAGE_READY", "FORWARD",
                                "FORWARD_RESULT", "KV_OP",   "KV_OK",         "UNLOAD",     "UNLOAD_OK",
                                "LOAD_PROGRESS", "HEARTBEAT",   "LINK_PROBE",    "LINK_PROBE_ECHO", "PROBE",      "PROBE_RESULT"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(MessageType::COUNT));
  auto i = static_cast<size_t>(type);
  return i < static_cast<size_t>(MessageType::COUNT) ? names[i] : "?";
}

namespace {
template <typename T>
void put(uint8_t*& p, T v) {
  std::memcpy(p, &v, sizeof(T));  // the protocol is little-endian, as are the hosts we build for
  p += sizeof(T);
}
template <typename T>
T get(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}
}  // namespace

void encode_header(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  uint8_t* p = out;
  put(p, h.magic);
  put(p, h.version);
  put(p, h.type);
  put(p, h.flags);
  put(p, h.reserved);
  put(p, h.request_id);
  put(p, h.payload_bytes);
}

FrameHeader decode_header(const uint8_t in[kHeaderBytes]) {
  const uint8_t* p = in;
  FrameHeader h;
  h.magic = get<uint32_t>(p);
  h.version = get<uint16_t>(p);
  h.type = get<uint16_t>(p);
  h.flags = get<uint32_t>(p);
  h.reserved = get<uint32_t>(p);
  h.request_id = get<uint64_t>(p);
  h.payload_bytes = get<uint64_t>(p);
  return h;
}

}  // namespace shoal::wire
