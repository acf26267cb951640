#pragma once
// The grammar of a forced tool call (tool_choice "required" or a named
// function): the reply is one call (or, with parallel_tool_calls, several)
// of an offered function with arguments valid for its parameters schema,
// written as the model's family writes calls where that is plain text
// (Hermes / Qwen <tool_call> … </tool_call>), otherwise as the bare JSON
// object (a list of them for parallel calls) that tool_calls.h reads for
// every family — the families whose marker is a control token (Llama's
// <|python_tag|>, Mistral's [TOOL_CALLS]) cannot be forced to write it.
#include <string>

#include <nlohmann/json.hpp>

namespace shoal::server {

enum class ToolCallStyle {
  kHermes,  // <tool_call>\n{"name": …, "arguments": …}\n</tool_call>
  kBare,    // {"name": …, "arguments": …}
};

// What the chat template's source shows the model.
ToolCallStyle tool_call_style(const std::string& template_source);

// `tools`: the request's OpenAI tool objects (already checked); `only`: the
// named function, or empty for any of them. `or_reply`: not null, a reply
// may instead be JSON for this schema (tools offered with tool_choice auto
// and a response_format: the model either calls or answers in the schema).
// Throws shoal::Error for a schema the grammar cannot hold a reply to.
std::string tool_call_gbnf(const nlohmann::ordered_json& tools, const std::string& only, bool parallel,
                           ToolCallStyle style, const nlohmann::ordered_json& or_reply = nullptr);

}  // namespace shoal::server
