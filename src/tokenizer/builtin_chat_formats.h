#pragma once
// The built-in chat formats (--chat-template NAME, or a model template
// that does not parse) as Jinja sources, one per family, rendered by the
// one Jinja engine that renders models' own templates. A family's variants
// (llama.cpp's names: llama2-sys-bos, mistral-v3-tekken, …) differ in
// spacing and where system text goes: the source reads them as variables
// (FormatFlags), so one source serves the family.
#include <string_view>

#include <nlohmann/json.hpp>

namespace shoal {

enum class ChatFormat;
class JinjaChat;

struct FormatFlags {
  // Llama 2 variants (llama.cpp's llama2, -sys, -sys-bos, -sys-strip).
  bool system_block = false;    // system text in <<SYS>> … <</SYS>>
  bool bos_in_history = false;  // "<s>" before every [INST] after the first
  bool strip = false;           // content.strip()
  bool spaced_reply = false;    // ' ' + reply + ' ' + eos_token
  // Mistral variants, and MistralV7's space after the markers.
  bool leading_space = false;   // v1: " [INST] … [/INST]"
  bool inner_space = true;      // not tekken: "[INST] …", " reply"
  bool trim_reply = false;      // v3 trims the assistant text
  bool system_last = false;     // system text joins the last user turn
  // Phi-3's "<|end|>", Zephyr's eos text after each turn.
  const char* turn_end = "</s>";
};

// The family's source, parsed once (shared, rendered from any thread).
const JinjaChat& builtin_format(ChatFormat family);
// The template variables a variant's flags give its family's source.
nlohmann::ordered_json format_variables(const FormatFlags& flags);

}  // namespace shoal
