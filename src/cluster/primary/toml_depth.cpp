#include "cluster/primary/toml_depth.h"

#include <vector>

#include "util/error.h"

namespace shoal {
namespace {

// A scanner that knows only what changes depth: where a key is (a line's
// start, a table header, inside an inline table after `{` or `,`), strings
// (so their dots and brackets do not count) and comments.
class DepthScanner {
 public:
  DepthScanner(std::string_view text, const std::string& source, int max_depth)
      : t_(text), source_(source), max_(max_depth) {}

  void run() {
    bool key = true;  // reading a key (a line's start, a header) rather than a value
    int dots = 0;
    std::vector<char> open;  // '[' and '{' of values not yet closed
    for (i_ = 0; i_ < t_.size(); ++i_) {
      const char c = t_[i_];
      if (c == '\n') {
        ++line_;
        if (open.empty()) key = true, dots = 0;
        continue;
      }
      if (c == '#') {
        while (i_ + 1 < t_.size() && t_[i_ + 1] != '\n') ++i_;
        continue;
      }
      if (c == '"' || c == '\'') {
        skip_string(c);
        continue;
      }
      if (key) {
        if (c == '.' && ++dots > max_) fail_at("a key or table header of more than {} dotted parts", max_);
        if (c == '=') key = false, dots = 0;
        if (c == ']' && open.empty()) dots = 0;  // a header's end: its line may have a comment only
        continue;
      }
      if (c == '[' || c == '{') {
        open.push_back(c);
        if (static_cast<int>(open.size()) > max_) fail_at("arrays or inline tables nested more than {} deep", max_);
        if (c == '{') key = true, dots = 0;
      } else if ((c == ']' || c == '}') && !open.empty()) {
        open.pop_back();
      } else if (c == ',' && !open.empty() && open.back() == '{') {
        key = true, dots = 0;
      }
    }
  }

 private:
  // Past a string opened by `quote` at i_ (one or three quotes; basic
  // strings take backslash escapes, literal ones do not).
  void skip_string(char quote) {
    const bool triple = t_.substr(i_, 3) == std::string_view(quote == '"' ? "\"\"\"" : "'''");
    i_ += triple ? 3 : 1;
    for (; i_ < t_.size(); ++i_) {
      const char c = t_[i_];
      if (c == '\n') ++line_;
      if (quote == '"' && c == '\\') {
        ++i_;
        continue;
      }
      if (c != quote) continue;
      if (!triple) return;
      if (t_.substr(i_, 3) == std::string_view(quote == '"' ? "\"\"\"" : "'''")) {
        i_ += 2;
        return;
      }
    }
  }

  template <typename... Args>
  [[noreturn]] void fail_at(fmt::format_string<Args...> what, Args&&... args) {
    fail("{}: {} (line {}): not read", source_, fmt::format(what, std::forward<Args>(args)...), line_);
  }

  std::string_view t_;
  const std::string& source_;
  int max_;
  size_t i_ = 0;
  int line_ = 1;
};

}  // namespace

void check_toml_depth(std::string_view text, const std::string& source, int max_depth) {
  DepthScanner(text, source, max_depth).run();
}

}  // namespace shoal
