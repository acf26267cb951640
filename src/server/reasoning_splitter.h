#pragma once
// Splits a thinking model's output into its reasoning and its answer, as
// llama-server's reasoning format "deepseek" does for the OpenAI API: the
// text of a leading <think>…</think> block becomes `reasoning_content`, the
// rest `content`. gpt-oss's harmony output is the same with other markers:
// the analysis channel's message is the reasoning, the final channel's the
// answer (tokenizer/chat_template.h, ReasoningMarkers). Works piece by piece
// for streams: a marker split across pieces is held back until it is whole.
#include <string>
#include <string_view>

#include "tokenizer/chat_template.h"

namespace shoal::server {

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(ReasoningMarkers markers = {}) : markers_(markers) {}

  struct Parts {
    std::string reasoning;
    std::string content;
  };

  // The next piece of generated text; returns what can be sent now.
  Parts feed(std::string_view piece);
  // The end of the output: whatever is still held back.
  Parts finish();

 private:
  enum class State { Start, Reasoning, ToAnswer, Content };
  ReasoningMarkers markers_;
  State state_ = State::Start;
  std::string held_;          // text not yet sent (a possible tag, or whitespace)
  bool trim_front_ = false;   // drop whitespace before the section's first character
};

}  // namespace shoal::server
