#pragma once
// Chat templates. The model's own `tokenizer.chat_template` (or
// --chat-template-file) renders the conversation through the Jinja engine
// (tokenizer/jinja_chat.h), as Python's jinja2 would. Its family is also
// recognised by distinctive markers, as llama.cpp's llm_chat_detect_template
// does: that gives the stop strings and reasoning markers, and, with
// --chat-template NAME or for a template that does not parse, the family's
// built-in format renders instead (tokenizer/builtin_chat_formats.h: Jinja
// sources, rendered by the same engine).
//
// BOS: render() never writes the BOS text that HF templates put first with
// `{{ bos_token }}`. The tokenizer adds BOS as `tokenizer.ggml.add_bos_token`
// says (llama.cpp does the same), so writing it here would double it. Marker
// text inside the conversation ("<|im_start|>", "</s>", Llama 2's "<s>"
// between turns) is written as text: tokenize the prompt with special-token
// parsing on.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/builtin_chat_formats.h"
#include "tokenizer/jinja_chat.h"

namespace shoal {

// Where a thinking model's reasoning and answer sit in its output: the
// reasoning opens with `open` at the start and ends at `close`; with
// `answer` set, the answer starts after that marker (gpt-oss's final
// channel), and whatever lies between (a new message's header) is dropped.
struct ReasoningMarkers {
  std::string_view open = "<think>";
  std::string_view close = "</think>";
  std::string_view answer = {};
};

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

// Families of prompt formats. Variants within a family (spacing, where the
// system text goes, BOS between turns) are read from the template source and
// kept as flags; name() tells the variant.
enum class ChatFormat {
  ChatML,     // <|im_start|>role\n…<|im_end|>\n (Qwen, SmolLM, Hermes, …)
  Phi4,       // <|im_start|>role<|im_sep|>…<|im_end|>
  Llama3,     // <|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|>
  Llama2,     // [INST] <<SYS>>\n…\n<</SYS>>\n\n… [/INST] (also Mistral v0.1/v0.2)
  Mistral,    // official Mistral v1 / v3 / v3-tekken: [INST]…[/INST]
  MistralV7,  // [SYSTEM_PROMPT]…[/SYSTEM_PROMPT][INST]…[/INST]
  Gemma,      // <start_of_turn>user\n…<end_of_turn>\n, assistant is "model"
  Phi3,       // <|user|>\n…<|end|>\n<|assistant|>\n
  Zephyr,     // <|user|>\n…</s>\n<|assistant|>\n
  Harmony,    // gpt-oss: <|start|>role<|message|>…<|end|>, the answer on channels
  Count,
};

class ChatTemplate {
 public:
  // Never throws. An empty template (a base model) gives ChatML with
  // fell_back() true, so the caller can warn, as llama.cpp does; a template
  // that is there but not recognised gives unknown() true, and render()
  // refuses with a message instead of guessing. A llama.cpp template name
  // ("chatml", "llama3", "gemma", "mistral-v7", …) selects that format.
  static ChatTemplate detect(const std::string& template_source);
  // The names detect() accepts, for messages.
  static std::string known_names();

  ChatFormat format() const { return format_; }
  const char* name() const { return name_; }
  bool fell_back() const { return fell_back_; }
  bool unknown() const { return unknown_; }
  // Throws shoal::Error naming --chat-template when unknown() and no Jinja
  // template renders.
  void require_known() const;
  // The conversation is rendered by this template from now on. With
  // strip_bos, a leading BOS text the template writes is dropped: the
  // tokenizer adds BOS itself (as llama.cpp strips it).
  void use_jinja(std::shared_ptr<const JinjaChat> jinja, bool strip_bos);
  bool uses_jinja() const { return jinja_ != nullptr; }
  // The Jinja source that renders (empty for a built-in format).
  std::string source() const { return jinja_ ? jinja_->source() : std::string(); }
  // A whole request (tool calls, tool results, tools, template variables)
  // rendered exactly as the template writes it, BOS text included: what
  // `shoal template` prints and /apply-template returns. Without a Jinja
  // template, the built-in formatter renders the messages' roles and text.
  std::string render_request(const ChatRenderRequest& request) const;
  // The same, as the model is to read it: a leading BOS text dropped when
  // the tokenizer adds BOS itself.
  std::string render_prompt(const ChatRenderRequest& request) const;
  // The template has a thinking block (Qwen3: <think>…</think> before the
  // answer; render() with reasoning off writes it empty, as the template
  // does for enable_thinking=false).
  bool thinks() const { return thinks_; }
  // How its output marks the reasoning (when thinks()).
  ReasoningMarkers reasoning_markers() const;
  // The system text the template inserts when the conversation has none
  // (SmolLM2, Qwen2.5); empty if it has no such default.
  const std::string& default_system() const { return default_system_; }

  // Throws shoal::Error for a role other than system/user/assistant, or for
  // an unknown() template. Earlier assistant turns lose their thinking
  // block when the template thinks (Qwen3's template drops it too).
  std::string render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt, bool reasoning = true) const;

  // Text markers that end the assistant's turn ("<|im_end|>", "<|eot_id|>").
  std::vector<std::string> stop_strings() const;

 private:
  ChatFormat format_ = ChatFormat::ChatML;
  const char* name_ = "chatml";
  bool fell_back_ = false;
  bool unknown_ = false;
  bool thinks_ = false;
  bool channel_thoughts_ = false;  // Gemma 4's reasoning markers (reasoning_markers)

  FormatFlags flags_;  // the variant of its family the built-in format writes
  std::shared_ptr<const JinjaChat> jinja_;
  bool strip_bos_ = false;

  std::string default_system_;

  bool set_variant(const std::string& name);
  std::string render_turns(const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt) const;
  std::string find_default_system(const std::string& source) const;
};

}  // namespace shoal
