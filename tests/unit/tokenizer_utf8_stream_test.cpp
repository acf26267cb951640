#include <gtest/gtest.h>

#include "tokenizer/utf8_stream.h"

namespace shoal {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8Stream, PassesCompleteTextThrough) {
  Utf8Stream s;
  EXPECT_EQ(s.push("hello "), "hello ");
  EXPECT_EQ(s.push("\xC3\xA9t\xC3\xA9"), "\xC3\xA9t\xC3\xA9");
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Stream, HoldsBackASplitCharacter) {
  const std::string llama = "\xF0\x9F\xA6\x99";  // U+1F999, four bytes
  for (size_t cut = 1; cut < llama.size(); ++cut) {
    Utf8Stream s;
    EXPECT_EQ(s.push(std::string("a").append(llama, 0, cut)), "a") << cut;
    EXPECT_TRUE(s.has_pending());
    EXPECT_EQ(s.push(llama.substr(cut) + "b"), llama + "b") << cut;
    EXPECT_FALSE(s.has_pending());
  }
}

TEST(Utf8Stream, ByteAtATime) {
  const std::string text = "x\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E y \xC3\xBC";
  Utf8Stream s;
  std::string out;
  for (char c : text) out += s.push(std::string(1, c));
  out += s.flush();
  EXPECT_EQ(out, text);
}

TEST(Utf8Stream, FlushReplacesAnUnfinishedSequence) {
  Utf8Stream s;
  EXPECT_EQ(s.push("ab\xE6\x97"), "ab");
  EXPECT_EQ(s.flush(), kFffd);
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Stream, ReplacesInvalidBytesAtOnce) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_EQ(s.push("\x80"), kFffd);                  // stray continuation byte
  EXPECT_EQ(s.push("\xC0\xAF"), kFffd + kFffd);      // overlong '/'
  EXPECT_EQ(s.push("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // a surrogate is never valid
  EXPECT_EQ(s.push("\xE6\x97" "c"), kFffd + "c");    // truncated by an ASCII byte
  EXPECT_EQ(s.push("\xF4\x90"), kFffd + kFffd);      // above U+10FFFF
  EXPECT_FALSE(s.has_pending());
}

}  // namespace
}  // namespace shoal
