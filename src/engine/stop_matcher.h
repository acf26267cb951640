#pragma once
// Stop strings over streamed text: text that might be the start of a stop
// string is held back until it is known not to be one, so a client never
// sees part of a stop marker.
#include <string>
#include <string_view>
#include <vector>

namespace shoal {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends text; returns what may be released now. Sets stopped() when a
  // stop string appeared (the stop string and anything after it are dropped).
  std::string push(std::string_view text);
  // Releases what is held back (at the end of generation).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that ended it (the earliest in the text), once stopped().
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace shoal
