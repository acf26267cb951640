#pragma once
// Turns a stream of token pieces (arbitrary bytes: a byte token may carry
// half a character) into valid UTF-8 text, for streaming generated text to a
// terminal or an SSE client.
#include <string>
#include <string_view>

namespace shoal {

class Utf8Stream {
 public:
  // Returns the valid UTF-8 that `bytes` completes. An incomplete sequence at
  // the end is held back until later bytes complete it; bytes that can never
  // become valid UTF-8 come out as U+FFFD (one per maximal invalid subpart,
  // the Unicode-recommended practice).
  std::string push(std::string_view bytes);

  // Everything still held back, an incomplete sequence as U+FFFD. Resets.
  std::string flush();

  bool has_pending() const { return !pending_.empty(); }

 private:
  std::string drain(bool at_end);

  std::string pending_;
};

}  // namespace shoal
