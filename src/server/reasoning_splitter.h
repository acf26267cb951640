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
  // opened: the prompt already opened the block (QwQ's and DeepSeek R1's
  // templates end the generation prompt with "<think>\n"), so the output
  // starts inside it.
  explicit ReasoningSplitter(ReasoningMarkers markers = {}, bool opened = false)
      : markers_(markers), state_(opened ? State::Reasoning : State::Start), trim_front_(opened) {}

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
  State state_;
  std::string held_;          // text not yet sent (a possible tag, or whitespace)
  bool trim_front_;           // drop whitespace before the section's first character
};

}  // namespace shoal::server
