#include "cluster/wire/protocol.h"

#include <cstring>

namespace shoal::wire {

namespace {
// Each type with its name; the build checks that the list has every type,
// in order (docs/protocol.md's table is checked against it by a test).
struct NamedType {
  MessageType type;
  const char* name;
};
constexpr NamedType kNames[] = {
    {MessageType::Hello, "HELLO"},          {MessageType::Auth, "AUTH"},
    {MessageType::AuthOk, "AUTH_OK"},       {MessageType::Error, "ERROR"},
    {MessageType::Ping, "PING"},            {MessageType::Pong, "PONG"},
    {MessageType::Stats, "STATS"},          {MessageType::StatsReply, "STATS_REPLY"},
    {MessageType::LoadStage, "LOAD_STAGE"}, {MessageType::LoadNeeds, "LOAD_NEEDS"},
    {MessageType::TensorData, "TENSOR_DATA"}, {MessageType::LoadCommit, "LOAD_COMMIT"},
    {MessageType::StageReady, "STAGE_READY"}, {MessageType::Forward, "FORWARD"},
    {MessageType::ForwardResult, "FORWARD_RESULT"}, {MessageType::KvOp, "KV_OP"},
    {MessageType::KvOk, "KV_OK"},           {MessageType::Unload, "UNLOAD"},
    {MessageType::UnloadOk, "UNLOAD_OK"},   {MessageType::LoadProgress, "LOAD_PROGRESS"},
    {MessageType::Heartbeat, "HEARTBEAT"},  {MessageType::LinkProbe, "LINK_PROBE"},
    {MessageType::LinkProbeEcho, "LINK_PROBE_ECHO"}, {MessageType::Probe, "PROBE"},
    {MessageType::ProbeResult, "PROBE_RESULT"},
    {MessageType::TensorLink, "TENSOR_LINK"},
    {MessageType::TensorShare, "TENSOR_SHARE"},
    {MessageType::GroupLink, "GROUP_LINK"},
    {MessageType::GroupLinked, "GROUP_LINKED"},
    {MessageType::CacheRead, "CACHE_READ"},
    {MessageType::CacheRows, "CACHE_ROWS"},
    {MessageType::CacheWrite, "CACHE_WRITE"},
    {MessageType::CacheCopy, "CACHE_COPY"},
};
constexpr bool every_type_once_in_order() {
  constexpr size_t n = sizeof(kNames) / sizeof(kNames[0]);
  if (n + 1 != static_cast<size_t>(MessageType::COUNT)) return false;
  for (size_t i = 0; i < n; ++i)
    if (static_cast<size_t>(kNames[i].type) != i + 1) return false;
  return true;
}
static_assert(every_type_once_in_order(), "kNames must list every MessageType once, in order of its code");
}  // namespace

const char* message_name(MessageType type) {
  const auto i = static_cast<size_t>(type);
  return i >= 1 && i < static_cast<size_t>(MessageType::COUNT) ? kNames[i - 1].name : "?";
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
