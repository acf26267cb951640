// docs/protocol.md is the wire format's specification: its table of message
// types must name every type the code has, with the code's number and name,
// and no other.
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

}  // namespace
}  // namespace shoal::wire
