#pragma once
// The binary messages of the token loop: FORWARD (batch metadata, the rows
// read after the model's last layer when that is known, an optional chain
// route, activations) and FORWARD_RESULT (activations).
// Decoding checks every length against the payload before touching it.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cluster/wire/activation_codec.h"

namespace shoal::wire {

struct ChainHop {
  std::string address;  // host:port of the next worker
  uint32_t stage_id = 0;
};

struct ForwardHeader {
  uint32_t stage_id = 0;
  uint32_t n_tokens = 0;
  uint32_t n_embd = 0;
  WireDType dtype = WireDType::F32;
};

// The widest FORWARD_RESULT rows: logits (a vocabulary).
constexpr uint32_t kMaxResultWidth = 1u << 20;

// FORWARD's flags.
constexpr uint8_t kForwardRowsOut = 1;  // the rows read after the model's last layer are listed
constexpr uint8_t kForwardLogits = 2;   // with rows out: the stage runs the output head on them and returns logits

// Encodes everything but the activations into `out` (reused buffer).
// rows_out, when not null, lists (ascending) the only rows read after the
// model's last layer: the stage that holds it finishes and returns just
// those (possibly none); with logits, it runs the output head on them and
// returns their logits (f32, n_vocab wide) instead.
void encode_forward_prefix(const ForwardHeader& h, std::span<const int32_t> positions,
                           std::span<const int32_t> seq_ids, const std::vector<int32_t>* rows_out,
                           std::span<const ChainHop> route, std::vector<uint8_t>& out, bool logits = false);

struct ForwardView {
  ForwardHeader header;
  std::span<const int32_t> positions;  // views into the payload (unaligned-safe copies below)
  std::span<const int32_t> seq_ids;
  bool has_rows_out = false;
  std::span<const int32_t> rows_out;  // when has_rows_out: strictly ascending, each < n_tokens
  bool logits = false;                // the rows out's logits are wanted (only with rows out)
  std::vector<ChainHop> route;
  std::span<const uint8_t> activations;
};
// Throws ProtocolError (Malformed) on any inconsistency. positions, seq_ids
// and rows_out are copied into the given vectors (the payload may be
// unaligned).
ForwardView decode_forward(std::span<const uint8_t> payload, std::vector<int32_t>& positions,
                           std::vector<int32_t>& seq_ids, std::vector<int32_t>& rows_out);

// FORWARD_RESULT: a fixed 12-byte prefix then the activations. It has
// n_tokens rows, or as many as FORWARD's rows_out listed (0 allowed); with
// FORWARD's logits, those rows' logits (n_embd is then the vocabulary).
void encode_result_prefix(uint32_t n_tokens, uint32_t n_embd, WireDType dtype, std::vector<uint8_t>& out);
struct ResultView {
  uint32_t n_tokens = 0;
  uint32_t n_embd = 0;
  WireDType dtype = WireDType::F32;
  std::span<const uint8_t> activations;
};
ResultView decode_result(std::span<const uint8_t> payload);

}  // namespace shoal::wire
