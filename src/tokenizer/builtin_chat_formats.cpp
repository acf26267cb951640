#include "tokenizer/builtin_chat_formats.h"

#include <array>
#include <memory>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_chat.h"

namespace shoal {
namespace {

// messages: {role, content} with roles system, user and assistant only
// (ChatTemplate::render checks); add_generation_prompt and the flags as
// variables.
constexpr std::string_view kChatML = R"({%- for m in messages -%}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%})";

constexpr std::string_view kPhi4 = R"({%- for m in messages -%}
{{- '<|im_start|>' + m.role + '<|im_sep|>' + m.content + '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant<|im_sep|>' -}}{%- endif -%})";

constexpr std::string_view kLlama3 = R"({%- for m in messages -%}
{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + (m.content | trim) + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%})";

// Phi-3 and Zephyr: the same turns, each family's end text.
constexpr std::string_view kRoleTags = R"({%- for m in messages -%}
{{- '<|' + m.role + '|>\n' + m.content + turn_end + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%})";

// Without <<SYS>> the model has no system slot: the text leads the turn.
// A user turn ends in [/INST], which is already the generation prompt.
constexpr std::string_view kLlama2 = R"({%- set ns = namespace(in_turn=true) -%}
{{- '[INST] ' -}}
{%- for m in messages -%}
{%- set content = (m.content | trim) if strip else m.content -%}
{%- if not ns.in_turn -%}
{{- '<s>[INST] ' if bos_in_history else '[INST] ' -}}
{%- set ns.in_turn = true -%}
{%- endif -%}
{%- if m.role == 'system' -%}
{{- ('<<SYS>>\n' + content + '\n<</SYS>>\n\n') if system_block else (content + '\n') -}}
{%- elif m.role == 'user' -%}
{{- content + ' [/INST]' -}}
{%- else -%}
{{- (' ' + content + ' </s>') if spaced_reply else (content + '</s>') -}}
{%- set ns.in_turn = false -%}
{%- endif -%}
{%- endfor -%})";

// Mistral v1/v3/v3-tekken; v3 holds the system text for the last user turn.
constexpr std::string_view kMistral = R"({%- set lead = ' ' if leading_space else '' -%}
{%- set inner = ' ' if inner_space else '' -%}
{%- set ns = namespace(last_user=-1, system='', in_turn=false) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'system' and system_last -%}
{%- set ns.system = ns.system + ('\n\n' if ns.system else '') + m.content -%}
{%- else -%}
{%- if not ns.in_turn -%}
{{- lead + '[INST]' + inner -}}
{%- set ns.in_turn = true -%}
{%- endif -%}
{%- if m.role == 'system' -%}
{{- m.content + '\n\n' -}}
{%- elif m.role == 'user' -%}
{%- if loop.index0 == ns.last_user and ns.system -%}{{- ns.system + '\n\n' -}}{%- endif -%}
{{- m.content + lead + '[/INST]' -}}
{%- else -%}
{{- inner + ((m.content | trim) if trim_reply else m.content) + '</s>' -}}
{%- set ns.in_turn = false -%}
{%- endif -%}
{%- endif -%}
{%- endfor -%})";

constexpr std::string_view kMistralV7 = R"({%- set sp = ' ' if inner_space else '' -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
{{- '[SYSTEM_PROMPT]' + sp + m.content + '[/SYSTEM_PROMPT]' -}}
{%- elif m.role == 'user' -%}
{{- '[INST]' + sp + m.content + '[/INST]' -}}
{%- else -%}
{{- sp + m.content + '</s>' -}}
{%- endif -%}
{%- endfor -%})";

// Gemma has no system role: its text opens the next user turn.
constexpr std::string_view kGemma = R"({%- set ns = namespace(system='') -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
{%- set ns.system = ns.system + (m.content | trim) -%}
{%- else -%}
{{- '<start_of_turn>model\n' if m.role == 'assistant' else '<start_of_turn>user\n' -}}
{%- if m.role != 'assistant' and ns.system -%}
{{- ns.system + '\n\n' -}}
{%- set ns.system = '' -%}
{%- endif -%}
{{- (m.content | trim) + '<end_of_turn>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%})";

// gpt-oss's template without tools: a system message with the model's
// identity, today's date and reasoning effort medium (the template's
// default); the conversation's first system message as the developer's
// instructions; earlier answers on the final channel (a later system
// message writes nothing, as there); the generation prompt opens an
// assistant message whose channel the model names.
constexpr std::string_view kHarmony = R"({{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>' -}}
{%- set ns = namespace(first=0) -%}
{%- if messages and messages[0].role == 'system' -%}
{%- if messages[0].content -%}{{- '<|start|>developer<|message|># Instructions\n\n' + messages[0].content + '\n\n<|end|>' -}}{%- endif -%}
{%- set ns.first = 1 -%}
{%- endif -%}
{%- for m in messages -%}
{%- if loop.index0 >= ns.first -%}
{%- if m.role == 'user' -%}
{{- '<|start|>user<|message|>' + m.content + '<|end|>' -}}
{%- elif m.role == 'assistant' -%}
{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + ('<|return|>' if loop.last and not add_generation_prompt else '<|end|>') -}}
{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%})";

std::string_view source_of(ChatFormat family) {
  switch (family) {
    case ChatFormat::ChatML: return kChatML;
    case ChatFormat::Phi4: return kPhi4;
    case ChatFormat::Llama3: return kLlama3;
    case ChatFormat::Llama2: return kLlama2;
    case ChatFormat::Mistral: return kMistral;
    case ChatFormat::MistralV7: return kMistralV7;
    case ChatFormat::Gemma: return kGemma;
    case ChatFormat::Phi3:
    case ChatFormat::Zephyr: return kRoleTags;
    case ChatFormat::Harmony: return kHarmony;
    case ChatFormat::Count: break;
  }
  return kChatML;
}

}  // namespace

const JinjaChat& builtin_format(ChatFormat family) {
  static const auto parsed = [] {
    std::array<std::unique_ptr<JinjaChat>, static_cast<size_t>(ChatFormat::Count)> all;
    for (size_t f = 0; f < all.size(); ++f)
      all[f] = std::make_unique<JinjaChat>(std::string(source_of(static_cast<ChatFormat>(f))), "", "");
    return all;
  }();
  return *parsed.at(static_cast<size_t>(family));
}

nlohmann::ordered_json format_variables(const FormatFlags& f) {
  return {{"system_block", f.system_block}, {"bos_in_history", f.bos_in_history}, {"strip", f.strip},
          {"spaced_reply", f.spaced_reply},   {"leading_space", f.leading_space},   {"inner_space", f.inner_space},
          {"trim_reply", f.trim_reply},       {"system_last", f.system_last},       {"turn_end", f.turn_end}};
}

}  // namespace shoal
