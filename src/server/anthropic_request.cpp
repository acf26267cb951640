// An Anthropic Messages request → the chat request it means (see
// anthropic_messages.h). Fields are named in Anthropic's dotted paths
// (messages.0.content.1.tool_use_id) in every error.
#include <fmt/format.h>

#include <set>

#include "server/anthropic_messages.h"
#include "server/request_errors.h"

namespace shoal::server {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void invalid(const std::string& field, const std::string& message) {
  throw ApiError(400, fmt::format("{}: {}", field, message), "invalid_request_error", field, "invalid_value");
}

[[noreturn]] void not_served(const std::string& field, const std::string& what) {
  throw ApiError(400, fmt::format("{}: {} is not supported by this server.", field, what), "invalid_request_error",
                 field, "unsupported_parameter");
}

const ojson& require(const ojson& object, const char* key, const std::string& where) {
  const ojson* v = field(object, key);
  if (!v) {
    const std::string field = where.empty() ? key : where + "." + key;
    throw ApiError(400, field + ": Field required", "invalid_request_error", field, "missing_required_parameter");
  }
  return *v;
}

std::string string_field(const ojson& object, const char* key, const std::string& where) {
  const ojson& v = require(object, key, where);
  if (!v.is_string()) invalid(where + "." + key, "Input should be a valid string");
  return v.get<std::string>();
}

// Claude Code stamps its system prompt with a billing header whose cch
// value changes on every request; left as sent, no prompt after it could be
// reused from the cache. Its five characters are made constant (as
// llama-server does); no other text is touched.
void normalize_billing_header(std::string& text) {
  constexpr std::string_view kHeader = "x-anthropic-billing-header:";
  constexpr size_t kStamp = 5;
  if (!text.starts_with(kHeader)) return;
  const size_t at = text.find("cch=", kHeader.size());
  if (at == std::string::npos) return;
  const size_t from = at + 4;
  if (from + kStamp < text.size() && text[from + kStamp] == ';') text.replace(from, kStamp, kStamp, 'f');
}

// Text blocks ({"type": "text", "text"}); cache_control and citations ask
// nothing of the generation (every prompt prefix is cached here anyway).
std::string text_of_block(const ojson& block, const std::string& where) {
  return string_field(block, "text", where);
}

std::string system_text(const ojson& system) {
  std::string text;
  if (system.is_string()) {
    text = system.get<std::string>();
  } else if (system.is_array()) {
    for (size_t i = 0; i < system.size(); ++i) {
      const std::string where = fmt::format("system.{}", i);
      if (!system[i].is_object() || !system[i].contains("type") || system[i]["type"] != "text")
        invalid(where, "system blocks must be text blocks ({\"type\": \"text\", \"text\": …})");
      if (!text.empty()) text += "\n";
      text += text_of_block(system[i], where);
    }
  } else {
    invalid("system", "Input should be a valid string or a list of text blocks");
  }
  normalize_billing_header(text);
  return text;
}

// A tool_result's content: a string, or text blocks (joined).
std::string tool_result_text(const ojson& block, const std::string& where) {
  const ojson* content = field(block, "content");
  if (!content) return {};
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) invalid(where + ".content", "Input should be a valid string or a list of blocks");
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const ojson& part = (*content)[i];
    const std::string at = fmt::format("{}.content.{}", where, i);
    if (!part.is_object()) invalid(at, "Input should be a valid block");
    const std::string type = string_field(part, "type", at);
    if (type != "text") not_served(at + ".type", fmt::format("a tool result block of type '{}' (only 'text')", type));
    if (!text.empty()) text += "\n";
    text += text_of_block(part, at);
  }
  return text;
}

// One Anthropic message → chat messages: an assistant turn (its text, its
// thinking as reasoning_content, its tool_use blocks as tool_calls), or a
// user turn (its tool_result blocks as tool messages, first, then its text).
void add_message(const ojson& m, size_t index, ojson& out) {
  const std::string where = fmt::format("messages.{}", index);
  if (!m.is_object()) invalid(where, "Input should be a valid message object");
  const std::string role = string_field(m, "role", where);
  if (role != "user" && role != "assistant")
    invalid(where + ".role", fmt::format("Input should be 'user' or 'assistant', but got '{}'", role));
  const ojson& content = require(m, "content", where);
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array()) invalid(where + ".content", "Input should be a valid string or a list of content blocks");
  std::string text, thinking;
  ojson calls = ojson::array(), results = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& block = content[i];
    const std::string at = fmt::format("{}.content.{}", where, i);
    if (!block.is_object()) invalid(at, "Input should be a valid content block");
    const std::string type = string_field(block, "type", at);
    if (type == "text") {
      if (!text.empty()) text += "\n";
      text += text_of_block(block, at);
    } else if (type == "thinking" && role == "assistant") {
      thinking += string_field(block, "thinking", at);
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Encrypted by another server: nothing here can read it.
    } else if (type == "tool_use" && role == "assistant") {
      const ojson& input = require(block, "input", at);
      if (!input.is_object()) invalid(at + ".input", "Input should be a valid dictionary");
      calls.push_back({{"id", string_field(block, "id", at)},
                       {"type", "function"},
                       {"function", {{"name", string_field(block, "name", at)}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (const ojson* e = field(block, "is_error"); e && !e->is_boolean())
        invalid(at + ".is_error", "Input should be a valid boolean");
      results.push_back({{"role", "tool"},
                         {"tool_call_id", string_field(block, "tool_use_id", at)},
                         {"content", tool_result_text(block, at)}});
    } else if (type == "thinking" || type == "redacted_thinking" || type == "tool_use" || type == "tool_result") {
      invalid(at + ".type", fmt::format("a '{}' block cannot be in a {} message", type, role));
    } else {
      not_served(at + ".type", fmt::format("a content block of type '{}' (text, tool_use, tool_result and thinking "
                                            "are)", type));
    }
  }
  for (ojson& r : results) out.push_back(std::move(r));
  if (role == "user" && (!text.empty() || results.empty())) {
    out.push_back({{"role", "user"}, {"content", text}});
  } else if (role == "assistant") {
    ojson turn = {{"role", "assistant"}, {"content", calls.empty() || !text.empty() ? ojson(text) : ojson(nullptr)}};
    if (!calls.empty()) turn["tool_calls"] = std::move(calls);
    if (!thinking.empty()) turn["reasoning_content"] = thinking;
    out.push_back(std::move(turn));
  }
}

// tools: [{"name", "description"?, "input_schema"}]; Anthropic's own server
// tools (web search, code execution, a typed bash or editor) run on
// Anthropic's side and have no meaning here.
ojson chat_tools(const ojson& tools) {
  if (!tools.is_array()) invalid("tools", "Input should be a valid list");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string where = fmt::format("tools.{}", i);
    if (!t.is_object()) invalid(where, "Input should be a valid tool object");
    if (const ojson* type = field(t, "type"); type && *type != "custom")
      not_served(where + ".type", fmt::format("the server tool {} (only custom tools with an input_schema)",
                                               type->dump()));
    ojson fn = {{"name", string_field(t, "name", where)}};
    if (const ojson* d = field(t, "description")) {
      if (!d->is_string()) invalid(where + ".description", "Input should be a valid string");
      fn["description"] = *d;
    }
    const ojson& schema = require(t, "input_schema", where);
    if (!schema.is_object()) invalid(where + ".input_schema", "Input should be a valid dictionary");
    fn["parameters"] = schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice: auto, any (a call is required), tool (that one), none.
void chat_tool_choice(const ojson& choice, ojson& chat) {
  if (!choice.is_object()) invalid("tool_choice", "Input should be a valid dictionary");
  const std::string type = string_field(choice, "type", "tool_choice");
  if (type == "auto") chat["tool_choice"] = "auto";
  else if (type == "any") chat["tool_choice"] = "required";
  else if (type == "none") chat["tool_choice"] = "none";
  else if (type == "tool")
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", string_field(choice, "name", "tool_choice")}}}};
  else invalid("tool_choice.type", fmt::format("Input should be 'auto', 'any', 'tool' or 'none', but got '{}'", type));
  if (const ojson* v = field(choice, "disable_parallel_tool_use")) {
    if (!v->is_boolean()) invalid("tool_choice.disable_parallel_tool_use", "Input should be a valid boolean");
    chat["parallel_tool_calls"] = !v->get<bool>();
  }
}

// thinking: enabled (with a budget) or adaptive turn a thinking template's
// reasoning on, disabled off; absent: the server's --reasoning. The budget
// is checked but not enforced: max_tokens bounds thinking and answer together.
void chat_thinking(const ojson& thinking, ojson& chat) {
  if (!thinking.is_object()) invalid("thinking", "Input should be a valid dictionary");
  const std::string type = string_field(thinking, "type", "thinking");
  if (type == "enabled") {
    const ojson& budget = require(thinking, "budget_tokens", "thinking");
    if (!budget.is_number_integer() || budget.get<int64_t>() < 1)
      invalid("thinking.budget_tokens", "Input should be a positive integer");
  } else if (type != "disabled" && type != "adaptive") {
    invalid("thinking.type", fmt::format("Input should be 'enabled', 'adaptive' or 'disabled', but got '{}'", type));
  }
  chat["chat_template_kwargs"]["enable_thinking"] = type != "disabled";
}

// output_config.format (or the older output_format): {"type": "json_schema", "schema"}.
void chat_output_format(const ojson& format, const std::string& where, ojson& chat) {
  if (!format.is_object()) invalid(where, "Input should be a valid dictionary");
  const std::string type = string_field(format, "type", where);
  if (type != "json_schema") invalid(where + ".type", fmt::format("Input should be 'json_schema', but got '{}'", type));
  const ojson& schema = require(format, "schema", where);
  if (!schema.is_object()) invalid(where + ".schema", "Input should be a valid dictionary");
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", schema}}}};
}

// What a Messages request may carry. Accepted without effect, because they
// ask nothing of the generation here: metadata, service_tier, cache_control
// (every prompt prefix is cached), speed, inference_geo and the account
// fields user_profile_id and workspace_id.
const std::set<std::string, std::less<>> kFields = {
    "model", "max_tokens", "messages", "system", "stop_sequences", "stream", "temperature", "top_p", "top_k",
    "tools", "tool_choice", "thinking", "output_config", "output_format", "metadata", "service_tier",
    "cache_control", "speed", "inference_geo", "user_profile_id", "workspace_id"};

// The chat parser names its own fields; the client sent Anthropic's.
std::string anthropic_field(const std::string& chat_field) {
  if (chat_field == "stop") return "stop_sequences";
  if (chat_field.starts_with("response_format")) return "output_config.format";
  if (chat_field.starts_with("chat_template_kwargs")) return "thinking";
  if (chat_field.starts_with("tool_choice") || chat_field.starts_with("parallel_tool_calls")) return "tool_choice";
  return chat_field;
}

}  // namespace

AnthropicRequest parse_anthropic_request(const ojson& body, const RequestDefaults& defaults, bool count_only) {
  for (const auto& [key, value] : body.items()) {
    if (key == "container" || key == "mcp_servers" || key == "context_management")
      not_served(key, fmt::format("'{}' (it runs on Anthropic's side)", key));
    if (!kFields.count(key))
      throw ApiError(400, fmt::format("{}: Extra inputs are not permitted", key), "invalid_request_error", key,
                     "unknown_parameter");
  }
  if (const ojson* v = field(body, "metadata"); v && !v->is_object()) invalid("metadata", "Input should be a valid dictionary");
  ojson chat = ojson::object();
  if (const ojson* model = field(body, "model")) {
    if (!model->is_string()) invalid("model", "Input should be a valid string");
    chat["model"] = *model;
  }
  if (!count_only) {
    const ojson& max_tokens = require(body, "max_tokens", "");
    if (!max_tokens.is_number_integer() || max_tokens.get<int64_t>() < 1)
      invalid("max_tokens", "Input should be an integer greater than or equal to 1");
    chat["max_tokens"] = max_tokens;
    for (const char* key : {"stream", "top_p", "top_k"})
      if (const ojson* v = field(body, key)) chat[key] = *v;
    if (const ojson* t = field(body, "temperature")) {  // Anthropic's range is [0, 1]
      if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 1)
        invalid("temperature", "Input should be a number in [0, 1]");
      chat["temperature"] = *t;
    }
  }
  AnthropicRequest out;
  if (const ojson* stops = field(body, "stop_sequences")) {
    if (!stops->is_array()) invalid("stop_sequences", "Input should be a valid list");
    for (size_t i = 0; i < stops->size(); ++i) {
      if (!(*stops)[i].is_string()) invalid(fmt::format("stop_sequences.{}", i), "Input should be a valid string");
      out.stop_sequences.push_back((*stops)[i].get<std::string>());
    }
    chat["stop"] = *stops;
  }

  ojson messages = ojson::array();
  if (const ojson* system = field(body, "system")) messages.push_back({{"role", "system"}, {"content", system_text(*system)}});
  const ojson& turns = require(body, "messages", "");
  if (!turns.is_array()) invalid("messages", "Input should be a valid list");
  if (turns.empty()) invalid("messages", "at least one message is required");
  for (size_t i = 0; i < turns.size(); ++i) add_message(turns[i], i, messages);
  chat["messages"] = std::move(messages);

  if (const ojson* tools = field(body, "tools")) chat["tools"] = chat_tools(*tools);
  if (const ojson* choice = field(body, "tool_choice")) chat_tool_choice(*choice, chat);
  if (const ojson* thinking = field(body, "thinking")) chat_thinking(*thinking, chat);
  if (const ojson* config = field(body, "output_config")) {
    if (!config->is_object()) invalid("output_config", "Input should be a valid dictionary");
    for (const auto& [key, value] : config->items())
      if (key != "format" && key != "effort") invalid("output_config." + key, "Extra inputs are not permitted");
    if (const ojson* format = field(*config, "format")) chat_output_format(*format, "output_config.format", chat);
  }
  if (const ojson* format = field(body, "output_format")) chat_output_format(*format, "output_format", chat);

  const bool older_format = field(body, "output_format") != nullptr;
  out.request = parse_translated_chat(chat, defaults, [older_format](const std::string& field) {
    return older_format && field.starts_with("response_format") ? "output_format" : anthropic_field(field);
  });
  return out;
}

}  // namespace shoal::server
