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

}  // namespace
}  // namespace shoal
