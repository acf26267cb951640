// FORWARD's list of rows out (the rows read after the model's last layer):
// it survives the round trip, and every malformed list is refused before
// it is used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cluster/wire/forward_message.h"
#include "cluster/wire/protocol.h"

namespace shoal::wire {
namespace {

// A FORWARD of 4 rows of 2 f32 values, with `rows_out` (or none) and one hop.
std::vector<uint8_t> forward_bytes(const std::vector<int32_t>* rows_out) {
  const std::vector<int32_t> positions{5, 6, 7, 8}, seq_ids{0, 0, 1, 1};
  const std::vector<ChainHop> route{{"127.0.0.1:9", 3}};
  std::vector<uint8_t> out;
  encode_forward_prefix({7, 4, 2, WireDType::F32}, positions, seq_ids, rows_out, route, out);
  out.resize(out.size() + 4 * 2 * sizeof(float), 0);
  return out;
}

// The offset of the list's count: the 16-byte fixed part, positions and seq ids.
constexpr size_t kRowsOutAt = 16 + 4 * 4 + 4 * 4;

TEST(ForwardMessage, RowsOutRoundTrip) {
  std::vector<int32_t> positions, seq_ids, rows_out;
  const std::vector<int32_t> listed{1, 3};
  auto bytes = forward_bytes(&listed);
  ForwardView v = decode_forward(bytes, positions, seq_ids, rows_out);
  EXPECT_TRUE(v.has_rows_out);
  EXPECT_EQ(std::vector<int32_t>(v.rows_out.begin(), v.rows_out.end()), listed);
  EXPECT_EQ(v.positions[3], 8);
  ASSERT_EQ(v.route.size(), 1u);
  EXPECT_EQ(v.route[0].address, "127.0.0.1:9");
  EXPECT_EQ(v.activations.size(), 4 * 2 * sizeof(float));

  const std::vector<int32_t> none;  // a prompt's chunk no one reads
  bytes = forward_bytes(&none);
  v = decode_forward(bytes, positions, seq_ids, rows_out);
  EXPECT_TRUE(v.has_rows_out);
  EXPECT_TRUE(v.rows_out.empty());

  bytes = forward_bytes(nullptr);
  v = decode_forward(bytes, positions, seq_ids, rows_out);
  EXPECT_FALSE(v.has_rows_out);
  EXPECT_TRUE(v.rows_out.empty());
}

void expect_malformed(const std::vector<uint8_t>& bytes) {
  std::vector<int32_t> positions, seq_ids, rows_out;
  try {
    decode_forward(bytes, positions, seq_ids, rows_out);
    ADD_FAILURE() << "decoded a malformed FORWARD";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Malformed) << e.what();
  }
}

TEST(ForwardMessage, MalformedRowsOutAreRefused) {
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{3, 1}, {1, 1}, {0, 4}, {-1}, {0, 1, 2, 3, 0}})
    expect_malformed(forward_bytes(&bad));

  const std::vector<int32_t> listed{1};
  auto bytes = forward_bytes(&listed);
  bytes[13] = 0x81;  // a flag this version does not know
  expect_malformed(bytes);

  bytes = forward_bytes(&listed);
  const uint32_t huge = 1u << 30;  // a count past the payload
  std::memcpy(bytes.data() + kRowsOutAt, &huge, sizeof huge);
  expect_malformed(bytes);
}

TEST(ForwardMessage, RowsOutPackToTheFrontAndBack) {
  constexpr int kWidth = 3;
  std::vector<float> rows(6 * kWidth);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  const std::vector<float> original = rows;
  const std::vector<int32_t> listed{0, 2, 3, 5};
  pack_rows(rows.data(), kWidth, listed);
  for (size_t i = 0; i < listed.size(); ++i)
    for (int c = 0; c < kWidth; ++c) EXPECT_EQ(rows[i * kWidth + c], original[listed[i] * kWidth + c]);
  std::fill(rows.begin() + listed.size() * kWidth, rows.end(), -1.0f);  // what is not sent is not kept
  unpack_rows(rows.data(), kWidth, listed);
  for (int32_t r : listed)
    for (int c = 0; c < kWidth; ++c) EXPECT_EQ(rows[r * kWidth + c], original[r * kWidth + c]);
}

TEST(ForwardMessage, ResultMayHoldNoRows) {
  std::vector<uint8_t> out;
  encode_result_prefix(0, 2, WireDType::F32, out);
  ResultView r = decode_result(out);
  EXPECT_EQ(r.n_tokens, 0u);
  EXPECT_TRUE(r.activations.empty());
  std::vector<uint8_t> encoded;
  encode_activations(WireDType::F16, nullptr, 0, 2, encoded);
  EXPECT_TRUE(encoded.empty());
}

}  // namespace
}  // namespace shoal::wire
