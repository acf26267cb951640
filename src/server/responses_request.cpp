// A Responses request → the chat request it means (see openai_responses.h).
// Errors are OpenAI's, naming the Responses field (input[2].call_id).
#include <fmt/format.h>

#include <set>

#include "server/openai_responses.h"
#include "server/request_errors.h"

namespace shoal::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string string_field(const ojson& object, const char* key, const std::string& where) {
  const ojson* v = field(object, key);
  const std::string name = where + "." + key;
  if (!v) missing_parameter(name);
  if (!v->is_string()) bad_value(name, "expected a string.");
  return v->get<std::string>();
}

// A message's content: a string, or parts of text (input_text,
// output_text, refusal), joined.
std::string content_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_value(where, "expected a string or an array of content parts.");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!part.is_object()) bad_value(at, "expected a content part object.");
    const std::string type = string_field(part, "type", at);
    if (type == "input_text" || type == "output_text" || type == "text") text += string_field(part, "text", at);
    else if (type == "refusal") text += string_field(part, "refusal", at);
    else unsupported(at + ".type", fmt::format("content parts of type '{}' (only text)", type));
  }
  return text;
}

// The input items, in order, as chat messages. A function_call joins the
// assistant turn just before it (a turn may call several functions); a
// reasoning item's text goes with the assistant turn after it.
ojson chat_messages(const ojson& input, const ojson* instructions) {
  ojson messages = ojson::array();
  if (instructions) {
    if (!instructions->is_string()) bad_value("instructions", "expected a string.");
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return messages;
  }
  if (!input.is_array()) bad_value("input", "expected a string or an array of input items.");
  if (input.empty()) bad_value("input", "expected at least one input item.");
  std::string reasoning;  // not yet given to an assistant turn
  auto assistant_turn = [&](ojson content) -> ojson& {
    messages.push_back({{"role", "assistant"}, {"content", std::move(content)}});
    if (!reasoning.empty()) messages.back()["reasoning_content"] = std::exchange(reasoning, {});
    return messages.back();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string at = fmt::format("input[{}]", i);
    if (!item.is_object()) bad_value(at, "expected an input item object.");
    const ojson* type_field = field(item, "type");
    if (type_field && !type_field->is_string()) bad_value(at + ".type", "expected a string.");
    const std::string type = type_field ? type_field->get<std::string>() : "message";
    if (type == "message") {
      const std::string role = string_field(item, "role", at);
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        bad_value(at + ".role", fmt::format("expected 'user', 'assistant', 'system' or 'developer', but got '{}'.", role));
      const ojson* content = field(item, "content");
      if (!content)
        missing_parameter(at + ".content");
      const std::string text = content_text(*content, at + ".content");
      if (role == "assistant") assistant_turn(text);
      else messages.push_back({{"role", role}, {"content", text}});
    } else if (type == "function_call") {
      const std::string arguments = string_field(item, "arguments", at);
      ojson call = {{"id", string_field(item, "call_id", at)},
                    {"type", "function"},
                    {"function", {{"name", string_field(item, "name", at)}, {"arguments", arguments}}}};
      const bool joins = !messages.empty() && messages.back()["role"] == "assistant" && reasoning.empty();
      ojson& turn = joins ? messages.back() : assistant_turn(nullptr);
      turn["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const ojson* output = field(item, "output");
      if (!output)
        missing_parameter(at + ".output");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", string_field(item, "call_id", at)},
                          {"content", content_text(*output, at + ".output")}});
    } else if (type == "reasoning") {
      // Its text (this server's reasoning items carry it), else its summary;
      // encrypted_content is another server's and cannot be read here.
      for (const char* key : {"content", "summary"}) {
        const ojson* parts = field(item, key);
        if (!parts) continue;
        if (!parts->is_array()) bad_value(fmt::format("{}.{}", at, key), "expected an array.");
        std::string text;
        for (size_t p = 0; p < parts->size(); ++p)
          if ((*parts)[p].is_object()) text += string_field((*parts)[p], "text", fmt::format("{}.{}[{}]", at, key, p));
        if (!text.empty()) {
          reasoning += text;
          break;
        }
      }
    } else {
      unsupported(at + ".type", fmt::format("input items of type '{}' (message, function_call, "
                                            "function_call_output and reasoning are)", type));
    }
  }
  return messages;
}

// tools: [{"type": "function", "name", "description"?, "parameters"?, "strict"?}].
ojson chat_tools(const ojson& tools) {
  if (!tools.is_array()) bad_value("tools", "expected an array.");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object()) bad_value(at, "expected a tool object.");
    const std::string type = string_field(t, "type", at);
    if (type != "function")
      unsupported(at + ".type", fmt::format("tools of type '{}' (only 'function'; hosted tools run on OpenAI's side)",
                                            type));
    ojson fn = {{"name", string_field(t, "name", at)}};
    for (const char* key : {"description", "parameters", "strict"})
      if (const ojson* v = field(t, key)) fn[key] = *v;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

ojson chat_tool_choice(const ojson& choice) {
  if (choice.is_string()) return choice;  // none, auto, required: the chat parser checks
  if (!choice.is_object()) bad_value("tool_choice", "expected a string or an object.");
  const std::string type = string_field(choice, "type", "tool_choice");
  if (type != "function")
    unsupported("tool_choice.type", fmt::format("'{}' (only 'none', 'auto', 'required' or a function)", type));
  return {{"type", "function"}, {"function", {{"name", string_field(choice, "name", "tool_choice")}}}};
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"}}.
void chat_text_format(const ojson& text, ojson& chat) {
  if (!text.is_object()) bad_value("text", "expected an object.");
  for (const auto& [key, value] : text.items())
    if (key != "format" && key != "verbosity") bad_value("text." + key, "expected only 'format' and 'verbosity'.");
  if (const ojson* v = field(text, "verbosity"); v && *v != "medium")
    unsupported("text.verbosity", "only 'medium' (the model writes as it writes)");
  const ojson* format = field(text, "format");
  if (!format) return;
  if (!format->is_object()) bad_value("text.format", "expected an object.");
  const std::string type = string_field(*format, "type", "text.format");
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    ojson spec = {{"name", string_field(*format, "name", "text.format")}};
    for (const char* key : {"schema", "strict", "description"})
      if (const ojson* v = field(*format, key)) spec[key] = *v;
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(spec)}};
  } else if (type != "text") {
    bad_value("text.format.type", fmt::format("expected 'text', 'json_object' or 'json_schema', but got '{}'.", type));
  }
}

// reasoning.effort: "none" turns a thinking template's reasoning off, any
// other level on (and reaches templates that read reasoning_effort, as
// gpt-oss's does); absent: the server's --reasoning.
void chat_reasoning(const ojson& reasoning, ojson& chat) {
  if (!reasoning.is_object()) bad_value("reasoning", "expected an object.");
  for (const auto& [key, value] : reasoning.items())
    if (key != "effort" && key != "summary" && key != "generate_summary")
      bad_value("reasoning." + key, "expected only 'effort' and 'summary'.");
  const ojson* effort = field(reasoning, "effort");
  if (!effort) return;
  static const std::set<std::string, std::less<>> kEfforts = {"none", "minimal", "low", "medium", "high", "xhigh"};
  if (!effort->is_string() || !kEfforts.count(effort->get<std::string>()))
    bad_value("reasoning.effort", "expected one of none, minimal, low, medium, high, xhigh.");
  chat["chat_template_kwargs"]["enable_thinking"] = *effort != "none";
  if (*effort == "low" || *effort == "medium" || *effort == "high") chat["chat_template_kwargs"]["reasoning_effort"] = *effort;
}

// Every field a Responses request may carry. Accepted without effect, as
// they ask nothing of the generation: store (nothing is stored either way),
// metadata, user, safety_identifier, service_tier, prompt_cache_key and
// prompt_cache_retention (every prompt prefix is cached here), include
// (logprobs are honoured; the outputs of hosted tools never occur, and
// reasoning is returned as text rather than encrypted), truncation
// "disabled"; top_k, min_p, repeat_penalty and seed pass to the sampler as
// on /v1/chat/completions.
const std::set<std::string, std::less<>> kFields = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning",
    "max_output_tokens", "temperature", "top_p", "top_logprobs", "stream", "store", "metadata", "user",
    "safety_identifier", "service_tier", "prompt_cache_key", "prompt_cache_retention", "include", "truncation",
    "top_k", "min_p", "repeat_penalty", "seed", "stream_options"};

// Named and refused: what needs state kept on the server or tools run on
// OpenAI's side.
const std::set<std::string, std::less<>> kRefused = {"previous_response_id", "conversation", "prompt", "background",
                                                     "max_tool_calls", "context_management"};

std::string responses_field(const std::string& chat_field) {
  if (chat_field == "max_tokens") return "max_output_tokens";
  if (chat_field.starts_with("response_format")) return "text.format";
  if (chat_field.starts_with("chat_template_kwargs")) return "reasoning";
  if (chat_field.starts_with("messages")) return "input";
  return chat_field;
}

}  // namespace

ResponsesRequest parse_responses_request(const ojson& body, const RequestDefaults& defaults) {
  for (const auto& [key, value] : body.items()) {
    if (kRefused.count(key) && !value.is_null() && !(key == "background" && value == false))
      unsupported(key, "this server keeps no responses, conversations or prompts, and runs no hosted tools; send "
                       "the whole conversation as input");
    if (!kFields.count(key) && !kRefused.count(key))
      throw ApiError(400, fmt::format("Unrecognized request argument supplied: {}", key), "invalid_request_error",
                     key, "unknown_parameter");
  }
  if (const ojson* v = field(body, "truncation"); v && *v != "disabled")
    unsupported("truncation", "only 'disabled' (a prompt longer than the context is a 400)");
  if (const ojson* v = field(body, "include")) {
    if (!v->is_array()) bad_value("include", "expected an array of strings.");
    for (const ojson& s : *v)
      if (!s.is_string()) bad_value("include", "expected an array of strings.");
  }
  if (const ojson* v = field(body, "stream_options"); v && !v->is_object()) bad_value("stream_options", "expected an object.");

  ojson chat = ojson::object();
  const ojson* input = field(body, "input");
  if (!input)
    missing_parameter("input");
  chat["messages"] = chat_messages(*input, field(body, "instructions"));
  for (const char* key : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "top_k", "min_p",
                          "repeat_penalty", "seed"})
    if (const ojson* v = field(body, key)) chat[key] = *v;
  if (const ojson* v = field(body, "max_output_tokens")) chat["max_tokens"] = *v;
  if (const ojson* v = field(body, "tools")) chat["tools"] = chat_tools(*v);
  if (const ojson* v = field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*v);
  if (const ojson* v = field(body, "text")) chat_text_format(*v, chat);
  if (const ojson* v = field(body, "reasoning")) chat_reasoning(*v, chat);
  // Logprobs: top_logprobs, or include's message.output_text.logprobs.
  bool logprobs = field(body, "top_logprobs") != nullptr;
  if (const ojson* v = field(body, "include"))
    for (const ojson& s : *v) logprobs = logprobs || s == "message.output_text.logprobs";
  if (logprobs) {
    chat["logprobs"] = true;
    if (const ojson* v = field(body, "top_logprobs")) chat["top_logprobs"] = *v;
  }

  ResponsesRequest out;
  out.request = parse_translated_chat(chat, defaults, responses_field);

  const json plain = json::parse(body.dump());
  auto echoed = [&](const char* key, json fallback) {
    auto it = plain.find(key);
    return it == plain.end() || it->is_null() ? fallback : *it;
  };
  const SamplingParams& s = out.request.options.sampling;
  out.echo = {{"instructions", echoed("instructions", nullptr)},
              {"tools", echoed("tools", json::array())},
              {"tool_choice", echoed("tool_choice", "auto")},
              {"parallel_tool_calls", out.request.parallel_tool_calls},
              {"text", echoed("text", {{"format", {{"type", "text"}}}})},
              {"reasoning", echoed("reasoning", {{"effort", nullptr}, {"summary", nullptr}})},
              {"max_output_tokens", echoed("max_output_tokens", nullptr)},
              // As written (0.8, not the float's 0.800000011920929).
              {"temperature", std::stod(fmt::format("{}", s.temperature))},
              {"top_p", std::stod(fmt::format("{}", s.top_p))},
              {"store", echoed("store", false)},
              {"metadata", echoed("metadata", json::object())},
              {"truncation", "disabled"},
              {"user", echoed("user", nullptr)},
              {"previous_response_id", nullptr}};
  return out;
}

}  // namespace shoal::server
