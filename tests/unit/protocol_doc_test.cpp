// docs/protocol.md is the wire format's specification: its table of message
// types must name every type the code has, with the code's number and name,
// and no other; and every header field is where its table of the frame
// header says, in its size, little-endian.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "cluster/wire/protocol.h"

namespace shoal::wire {
namespace {

TEST(ProtocolDoc, MessageTableMatchesTheCode) {
  std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/docs/protocol.md");
  ASSERT_TRUE(in) << "docs/protocol.md is missing";
  std::map<int, std::string> documented;
  bool in_table = false;
  const std::regex row(R"(^\| (\d+) \| ([A-Z_]+) \|)");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_table = line == "## Message types";
    std::smatch m;
    if (in_table && std::regex_search(line, m, row)) {
      const int code = std::stoi(m[1]);
      EXPECT_FALSE(documented.count(code)) << "type " << code << " documented twice";
      documented[code] = m[2];
    }
  }
  const int count = static_cast<int>(MessageType::COUNT);
  EXPECT_EQ(documented.size(), static_cast<size_t>(count - 1));
  for (int code = 1; code < count; ++code)
    EXPECT_EQ(documented[code], message_name(static_cast<MessageType>(code))) << "type " << code;
}

TEST(ProtocolDoc, HeaderFieldsSitAtTheirDocumentedOffsets) {
  std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/docs/protocol.md");
  ASSERT_TRUE(in) << "docs/protocol.md is missing";
  FrameHeader h;
  h.magic = kMagic;
  h.version = kProtocolVersion;
  h.type = 0x0b0a;
  h.flags = 0x0d0c0b0a;
  h.reserved = 0x1d1c1b1a;
  h.request_id = 0x2827262524232221ull;
  h.payload_bytes = 0x3837363534333231ull;
  const std::map<std::string, uint64_t> values = {
      {"magic", h.magic}, {"version", h.version}, {"type", h.type}, {"flags", h.flags},
      {"reserved", h.reserved}, {"request_id", h.request_id}, {"payload_bytes", h.payload_bytes}};
  uint8_t bytes[kHeaderBytes] = {};
  encode_header(h, bytes);
  bool in_section = false;
  int fields = 0;
  const std::regex row(R"(^\| (\d+) \| (\d+) \| ([a-z_]+) \|)");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Frames";
    std::smatch m;
    if (!in_section || !std::regex_search(line, m, row)) continue;
    const size_t offset = std::stoul(m[1]), size = std::stoul(m[2]);
    const std::string name = m[3];
    ASSERT_TRUE(values.count(name)) << "the doc's header has a field the code does not: " << name;
    ASSERT_LE(offset + size, kHeaderBytes) << name;
    uint64_t got = 0;
    for (size_t i = 0; i < size; ++i) got |= uint64_t{bytes[offset + i]} << (8 * i);
    EXPECT_EQ(got, values.at(name)) << name << " is not at offset " << offset;
    ++fields;
  }
  EXPECT_EQ(fields, static_cast<int>(values.size()));
  const FrameHeader back = decode_header(bytes);
  EXPECT_EQ(back.request_id, h.request_id);
  EXPECT_EQ(back.payload_bytes, h.payload_bytes);
  EXPECT_EQ(back.reserved, h.reserved);
}

}  // namespace
}  // namespace shoal::wire
