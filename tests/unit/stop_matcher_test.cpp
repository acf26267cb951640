// Stop strings: text is released up to a stop string, held back while it
// may still be one, and the stop string that ended it is the earliest in
// the text (llama-server's stopping_word), whatever order they were given in.
#include "engine/stop_matcher.h"

#include <gtest/gtest.h>

namespace shoal {
namespace {

TEST(StopMatcher, ReleasesUpToTheEarliestStopAndNamesIt) {
  StopMatcher m({"world", "lo w"});
  std::string out = m.push("hel");
  EXPECT_FALSE(m.stopped());
  out += m.push("lo world!");  // both appear at once
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "hel");
  EXPECT_EQ(m.matched(), "lo w");  // it starts before "world" does
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HeldBackTextComesOutWhenNoStopFollows) {
  StopMatcher m({"</s>"});
  EXPECT_EQ(m.push("a</"), "a");
  EXPECT_EQ(m.push("b"), "</b");
  EXPECT_EQ(m.push("<"), "");
  EXPECT_EQ(m.flush(), "<");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.matched(), "");
}

// llama-server's n_indent: the first line is free; a later line indented
// less ends the text at its first character, newline and indentation kept.
TEST(StopMatcher, ALineIndentedLessThanTheMinimumEndsTheText) {
  StopMatcher m({}, 4);
  std::string out = m.push("a + b\n");  // the first line may start anywhere
  out += m.push("    c\n\n  ");          // an indented line, an empty one, then two spaces
  EXPECT_FALSE(m.stopped());
  out += m.push("  d\n  e");             // four spaces in all: still fine; "e" has two
  EXPECT_TRUE(m.stopped());
  EXPECT_TRUE(m.stopped_by_indent());
  EXPECT_EQ(out, "a + b\n    c\n\n    d\n  ");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, IndentationAndStopStringsTogether) {
  StopMatcher m({"END"}, 2);
  EXPECT_EQ(m.push("x\n  yEND\nz"), "x\n  y");
  EXPECT_FALSE(m.stopped_by_indent());
  EXPECT_EQ(m.matched(), "END");
  StopMatcher n({"END"}, 2);
  EXPECT_EQ(n.push("x\nz END"), "x\n");  // the short line comes first
  EXPECT_TRUE(n.stopped_by_indent());
}

}  // namespace
}  // namespace shoal
