// libFuzzer target: every parser of bytes from the network — frame header,
// FORWARD, FORWARD_RESULT, the JSON control messages (model config) — must
// accept or throw shoal::Error, never crash.
//   build-fuzz/fuzz_wire_messages -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cluster/wire/connection.h"
#include "cluster/wire/forward_message.h"
#include "cluster/wire/model_config_json.h"
#include "cluster/wire/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::wire;
  if (size >= kHeaderBytes) (void)decode_header(data);
  std::span<const uint8_t> bytes(data, size);
  std::vector<int32_t> positions, seq_ids, rows_out;
  try {
    ForwardView v = decode_forward(bytes, positions, seq_ids, rows_out);
    std::vector<float> rows(static_cast<size_t>(v.header.n_tokens) * v.header.n_embd);
    decode_activations(v.header.dtype, v.activations.data(), v.header.n_tokens, v.header.n_embd, rows.data());
  } catch (const shoal::Error&) {
  }
  try {
    (void)decode_result(bytes);
  } catch (const shoal::Error&) {
  }
  try {
    Frame frame;
    frame.header.type = static_cast<uint16_t>(MessageType::LoadStage);
    frame.payload.assign(data, data + size);
    auto body = parse_json(frame);
    if (body.contains("config")) (void)config_from_json(body["config"]);
  } catch (const shoal::Error&) {
  }
  return 0;
}
