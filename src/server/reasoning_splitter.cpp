#include "server/reasoning_splitter.h"

#include <algorithm>

namespace shoal::server {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest proper prefix of `tag` that `s` ends with (the
// tag may be arriving in the next piece).
size_t partial_tag_at_end(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

void drop_leading_space(std::string& s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  s.erase(0, i);
}

}  // namespace

ReasoningSplitter::Parts ReasoningSplitter::feed(std::string_view piece) {
  Parts out;
  held_ += piece;
  for (;;) {
    switch (state_) {
      case State::Start: {
        // Only a block at the very start (after whitespace) is reasoning.
        const std::string_view open = markers_.open, answer = markers_.answer;
        size_t i = 0;
        while (i < held_.size() && is_space(held_[i])) ++i;
        const std::string_view rest = std::string_view(held_).substr(i);
        // Maybe the marker is still coming.
        if ((rest.size() < open.size() && open.starts_with(rest)) ||
            (!answer.empty() && rest.size() < answer.size() && answer.starts_with(rest)))
          return out;
        if (rest.starts_with(open)) {
          held_.erase(0, i + open.size());
          state_ = State::Reasoning;
          trim_front_ = true;
        } else if (!answer.empty() && rest.starts_with(answer)) {  // an answer without reasoning
          held_.erase(0, i + answer.size());
          state_ = State::Content;
          trim_front_ = true;
        } else {
          state_ = State::Content;
        }
        continue;
      }
      case State::Reasoning: {
        if (trim_front_) {
          drop_leading_space(held_);
          if (held_.empty()) return out;
          trim_front_ = false;
        }
        const std::string_view close_tag = markers_.close;
        const size_t close = held_.find(close_tag);
        size_t end = close == std::string::npos ? held_.size() - partial_tag_at_end(held_, close_tag) : close;
        // Whitespace before the tag belongs to the block's end, not its text.
        while (end > 0 && is_space(held_[end - 1])) --end;
        out.reasoning += held_.substr(0, end);
        if (close == std::string::npos) {
          held_.erase(0, end);
          return out;
        }
        held_.erase(0, close + close_tag.size());
        state_ = markers_.answer.empty() ? State::Content : State::ToAnswer;
        trim_front_ = true;  // the answer starts at its first non-space
        continue;
      }
      case State::ToAnswer: {
        // The next message's header ("<|start|>assistant") up to the answer's marker is dropped.
        const size_t at = held_.find(markers_.answer);
        if (at == std::string::npos) {
          held_.erase(0, held_.size() - partial_tag_at_end(held_, markers_.answer));
          return out;
        }
        held_.erase(0, at + markers_.answer.size());
        state_ = State::Content;
        continue;
      }
      case State::Content:
        if (trim_front_) {
          drop_leading_space(held_);
          if (held_.empty()) return out;
          trim_front_ = false;
        }
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReasoningSplitter::Parts ReasoningSplitter::finish() {
  Parts out;
  if (state_ == State::Reasoning) {
    if (trim_front_) drop_leading_space(held_);
    out.reasoning = held_;  // cut off inside the block (max_tokens): it is still reasoning
  } else if (!(state_ == State::Content && trim_front_)) {
    out.content = held_;
  }
  held_.clear();
  return out;
}

}  // namespace shoal::server
