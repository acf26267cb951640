// Anthropic's Messages answer: a message of content blocks (thinking, text,
// tool_use), or the stream the SDK's accumulator expects: message_start,
// per block content_block_start / content_block_delta (text_delta,
// thinking_delta, input_json_delta) / content_block_stop, message_delta
// with the stop reason and usage, message_stop.
#include "server/anthropic_messages.h"

#include <algorithm>

namespace shoal::server {
namespace {

// A call's input as an object; the parser made the arguments from valid
// JSON, so the fallback is for safety only.
json input_of(const ToolCall& call) {
  json input = json::parse(call.arguments, nullptr, false);
  return input.is_object() ? input : json::object();
}

class AnthropicReplyFormat : public ReplyFormat {
 public:
  AnthropicReplyFormat(const ResponseMeta& meta, std::vector<std::string> stops, int n_prompt)
      : meta_(meta), stops_(std::move(stops)), n_prompt_(n_prompt) {}

  json whole(const Reply& r) override {
    json content = json::array();
    if (!r.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", r.reasoning}, {"signature", ""}});
    if (!r.content.empty() || (r.calls.empty() && r.reasoning.empty()))
      content.push_back({{"type", "text"}, {"text", r.content}});
    for (const ToolCall& c : r.calls)
      content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input_of(c)}});
    json message = {{"id", meta_.id}, {"type", "message"}, {"role", "assistant"}, {"model", meta_.model},
                    {"content", std::move(content)}};
    add_stop(message, r);
    message["usage"] = usage(r.usage);
    return message;
  }

  std::string open() override {
    json message = {{"id", meta_.id}, {"type", "message"}, {"role", "assistant"}, {"model", meta_.model},
                    {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                    {"usage", {{"input_tokens", n_prompt_}, {"output_tokens", 0}}}};
    return event("message_start", {{"type", "message_start"}, {"message", std::move(message)}});
  }

  std::string delta(std::string_view reasoning, std::string_view content, std::vector<TokenLogprob>& logprobs) override {
    logprobs.clear();  // the Messages API has no logprobs
    std::string out;
    if (!reasoning.empty()) {
      out += start_block("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      out += block_delta({{"type", "thinking_delta"}, {"thinking", std::string(reasoning)}});
    }
    if (!content.empty()) {
      out += start_block("text", {{"type", "text"}, {"text", ""}});
      out += block_delta({{"type", "text_delta"}, {"text", std::string(content)}});
    }
    return out;
  }

  std::string finish(const Reply& r) override {
    constexpr size_t kPiece = 24;  // the input is streamed in pieces, as Anthropic's is
    std::string out = stop_block();
    for (const ToolCall& c : r.calls) {
      const std::string input = input_of(c).dump();
      out += start_block("tool_use", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}});
      for (size_t at = 0; at < input.size(); at += kPiece)
        out += block_delta({{"type", "input_json_delta"}, {"partial_json", input.substr(at, kPiece)}});
      out += stop_block();
    }
    json delta = json::object();
    json end = {{"type", "message_delta"}};
    add_stop(delta, r);
    end["delta"] = std::move(delta);
    end["usage"] = usage(r.usage);
    out += event("message_delta", end);
    return out + event("message_stop", {{"type", "message_stop"}});
  }

  std::string failure(const ApiError& e) override {
    return stop_block() + event("error", anthropic_error_body(e));
  }

 private:
  static std::string event(std::string_view name, const json& data) { return named_sse_event(name, data); }

  // Opens a block of `type` unless one is open already (closing another kind).
  std::string start_block(const std::string& type, const json& block) {
    if (open_ == type && type != "tool_use") return {};
    std::string out = stop_block();
    open_ = type;
    return out + event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
  }
  std::string block_delta(const json& delta) {
    return event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
  }
  std::string stop_block() {
    if (open_.empty()) return {};
    open_.clear();
    return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
  }

  // stop_reason: max_tokens at the limit; tool_use when the reply called;
  // stop_sequence when one of the client's stop sequences ended it (an end
  // token or the template's end-of-turn marker is end_turn).
  void add_stop(json& out, const Reply& r) const {
    const bool by_client = !r.stop_string.empty() &&
                           std::find(stops_.begin(), stops_.end(), r.stop_string) != stops_.end();
    out["stop_reason"] = r.finish_reason == "length" ? "max_tokens"
                         : !r.calls.empty()          ? "tool_use"
                         : by_client                 ? "stop_sequence"
                                                     : "end_turn";
    out["stop_sequence"] = by_client ? json(r.stop_string) : json(nullptr);
  }

  // Anthropic counts the prompt tokens read from the cache apart from the rest.
  static json usage(const Usage& u) {
    return {{"input_tokens", u.prompt_computed},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.prompt_tokens - u.prompt_computed},
            {"output_tokens", u.completion_tokens}};
  }

  ResponseMeta meta_;
  std::vector<std::string> stops_;
  int n_prompt_;      // what message_start says of the prompt before the cache is known
  std::string open_;  // the kind of the block being streamed; empty: none
  int index_ = 0;     // the index of the open block, or of the next one
};

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

std::unique_ptr<ReplyFormat> anthropic_reply_format(const ResponseMeta& meta, std::vector<std::string> stop_sequences,
                                                    int n_prompt) {
  return std::make_unique<AnthropicReplyFormat>(meta, std::move(stop_sequences), n_prompt);
}

json anthropic_error_body(const ApiError& e) {
  return {{"type", "error"}, {"error", {{"type", anthropic_error_type(e.status)}, {"message", e.what()}}}};
}

}  // namespace shoal::server
