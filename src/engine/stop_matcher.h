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
  // min_indent > 0: also stop at the first character of a line (after the
  // first) indented by fewer than min_indent spaces or tabs; the newline and
  // the indentation before it are kept.
  explicit StopMatcher(std::vector<std::string> stops, int min_indent = 0)
      : stops_(std::move(stops)), min_indent_(min_indent) {}

  // Appends text; returns what may be released now. Sets stopped() when a
  // stop string appeared (the stop string and anything after it are dropped).
  std::string push(std::string_view text);
  // Releases what is held back (at the end of generation).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that ended it (the earliest in the text), once stopped().
  const std::string& matched() const { return matched_; }
  // Stopped by a line's indentation rather than a stop string.
  bool stopped_by_indent() const { return stopped_ && matched_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
  // The indentation rule's state over the released text.
  std::string indent_checked(std::string text);
  int min_indent_ = 0;
  bool line_start_ = false;  // after a newline, before the line's first other character
  int indent_ = 0;           // spaces and tabs seen at this line's start
};

}  // namespace shoal
