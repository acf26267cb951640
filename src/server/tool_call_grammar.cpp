#include "server/tool_call_grammar.h"

#include <fmt/format.h>

#include "server/json_schema_grammar.h"
#include "util/error.h"

namespace shoal::server {

ToolCallStyle tool_call_style(const std::string& template_source) {
  return template_source.find("<tool_call>") != std::string::npos ? ToolCallStyle::kHermes : ToolCallStyle::kBare;
}

std::string tool_call_gbnf(const nlohmann::ordered_json& tools, const std::string& only, bool parallel,
                           ToolCallStyle style, const nlohmann::ordered_json& or_reply) {
  JsonGrammarBuilder b;
  std::string calls;
  for (const auto& tool : tools) {
    const auto& fn = tool["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    const nlohmann::ordered_json params = fn.contains("parameters") && fn["parameters"].is_object()
                                              ? fn["parameters"]
                                              : nlohmann::ordered_json{{"type", "object"}};
    std::string args;
    try {
      args = b.add_schema(params, name + "-arguments");
    } catch (const Error& e) {
      fail("tools: function '{}': {}", name, e.what());
    }
    // {"name": "…", "arguments": …} with the spacing the model's examples use.
    const std::string head = fmt::format("{{\"name\": {}, \"arguments\": ", nlohmann::json(name).dump());
    const std::string call = b.add_rule(name + "-call", gbnf_literal(head) + " " + args + " \"}\"");
    calls += (calls.empty() ? "" : " | ") + call;
  }
  if (calls.empty()) fail("tool_choice: no offered function is named '{}'", only);
  const std::string call = b.add_rule("call", calls);
  std::string root;
  if (style == ToolCallStyle::kHermes) {
    const std::string tagged = b.add_rule("tagged-call", "\"<tool_call>\\n\" " + call + " \"\\n</tool_call>\"");
    root = parallel ? tagged + " (\"\\n\" " + tagged + ")*" : tagged;
  } else {
    root = parallel ? "\"[\" " + call + " (\", \" " + call + ")* \"]\"" : call;
  }
  if (!or_reply.is_null()) {
    std::string reply;
    try {
      reply = b.add_schema(or_reply, "reply");
    } catch (const Error& e) {
      fail("response_format: {}", e.what());
    }
    root = "(" + root + ") | " + reply;
  }
  b.add_rule("root", root);
  return b.gbnf();
}

}  // namespace shoal::server
