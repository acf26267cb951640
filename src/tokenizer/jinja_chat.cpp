#include "tokenizer/jinja_chat.h"

#include "util/error.h"

namespace shoal {
namespace {

nlohmann::ordered_json with_object_arguments(nlohmann::ordered_json messages) {
  if (!messages.is_array()) fail("messages must be a JSON array");
  for (auto& m : messages) {
    if (!m.is_object()) fail("each message must be a JSON object");
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (auto& call : *calls) {
      if (!call.is_object()) continue;
      auto fn = call.find("function");
      if (fn == call.end() || !fn->is_object()) continue;
      auto args = fn->find("arguments");
      if (args == fn->end() || !args->is_string()) continue;
      auto parsed = nlohmann::ordered_json::parse(args->get<std::string>(), nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) *args = std::move(parsed);
    }
  }
  return messages;
}

}  // namespace

JinjaChat::JinjaChat(const std::string& source, std::string bos_token, std::string eos_token)
    : source_(source), template_(source), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {}

std::string JinjaChat::render(const ChatRenderRequest& request) const {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (request.kwargs.is_object())
    for (const auto& [k, v] : request.kwargs.items()) context[k] = v;
  context["messages"] = with_object_arguments(request.messages);
  // Undefined without tools, as llama-server leaves them (not None, on
  // which a template's `{% for tool in tools %}` fails).
  if (request.tools.is_array() && !request.tools.empty()) context["tools"] = request.tools;
  context["add_generation_prompt"] = request.add_generation_prompt;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  return template_.render(context);
}

}  // namespace shoal
