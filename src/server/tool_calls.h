#pragma once
// A model's tool calls, read out of its text as each family writes them,
// into OpenAI's tool_calls:
//   Hermes / Qwen    <tool_call>{"name": …, "arguments": {…}}</tool_call>, one or more
//   Llama 3.x        <|python_tag|>{"name": …, "parameters": {…}} or the bare object
//   Mistral          [TOOL_CALLS][{"name": …, "arguments": {…}}, …] or name[ARGS]{…}
//   GLM 4.5+         <tool_call>name <arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>
//   DeepSeek         <｜tool▁call▁begin｜>function<｜tool▁sep｜>name ```json {…}``` <｜tool▁call▁end｜>
//                    (V3, R1) or name<｜tool▁sep｜>{…} (V3.1+), in a <｜tool▁calls▁begin｜> section
//   Kimi K2          <|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{…}<|tool_call_end|>
//   gpt-oss          … to=functions.name<|channel|>commentary json<|message|>{…}
//   MiniMax M2       <minimax:tool_call><invoke name="name"><parameter name="k">v</parameter>…</invoke>…
//                    </minimax:tool_call>
//   any family       a reply that is nothing but such an object (or a list of
//                    them), bare or in a ```json fence, naming an offered tool
//                    (small models, Qwen2.5-Coder among them, answer so;
//                    llama.cpp's Hermes parser accepts it too)
// Text that turns out not to be a call stays content: nothing is lost.
#include <string>
#include <string_view>
#include <vector>

namespace shoal::server {

struct ToolCall {
  std::string id;         // call_…, unique enough within a conversation
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI sends and expects a string)
};

struct ToolReply {
  std::string content;  // what is not a call, trimmed
  std::vector<ToolCall> calls;
};

// Reads the calls out of a whole reply; `tools` are the offered names.
ToolReply parse_tool_calls(const std::string& text, const std::vector<std::string>& tools);

// The marker texts of every family above: where one is a control token of
// the model's vocabulary, it must be shown in the reply's text (it is
// hidden otherwise) for the calls to be read, as llama-server's preserved
// tokens are.
const std::vector<std::string>& tool_call_markers();

// For streams: content is sent as it comes until a call may be starting (a
// marker, or a reply that opens with '{', '[' or a ``` fence); from there
// the text is held, and finish() parses it.
class ToolCallSplitter {
 public:
  explicit ToolCallSplitter(std::vector<std::string> tools = {}) : tools_(std::move(tools)) {}
  // The next piece of text; returns the content that can be sent now.
  std::string feed(std::string_view piece);
  // The end: the calls, and whatever content was still held.
  ToolReply finish();

 private:
  std::vector<std::string> tools_;
  std::string held_;
  bool started_ = false;  // some non-space text has been seen
  bool holding_ = false;  // a call may have begun: hold everything
};

}  // namespace shoal::server
