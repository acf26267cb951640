#include "engine/stop_matcher.h"

#include <algorithm>

namespace shoal {

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return "";
  pending_.append(text);
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    size_t at = pending_.find(s);
    if (at != std::string::npos && at < cut) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return indent_checked(std::move(out));
  }
  // Hold back the longest tail that is a prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_)
    for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return indent_checked(std::move(out));
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return indent_checked(std::move(out));
}

// The text is released as it comes: only a line's first character after
// its indentation decides, and that character is where the text is cut.
std::string StopMatcher::indent_checked(std::string text) {
  if (min_indent_ <= 0) return text;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      line_start_ = true;
      indent_ = 0;
    } else if (line_start_ && (c == ' ' || c == '\t')) {
      ++indent_;
    } else if (line_start_) {
      line_start_ = false;
      if (indent_ < min_indent_) {
        stopped_ = true;
        matched_.clear();
        pending_.clear();
        text.resize(i);
        return text;
      }
    }
  }
  return text;
}

}  // namespace shoal
