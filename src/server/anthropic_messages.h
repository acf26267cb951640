#pragma once
// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens),
// which Claude Code and the `anthropic` SDK speak. A Messages request is a
// chat request in other words: it is checked in Anthropic's terms, written
// as the chat request it means (system and messages, tool_use and
// tool_result blocks as tool calls and tool messages, tools, tool_choice,
// thinking, the output format) and parsed by the chat parser, so every
// limit and check of /v1/chat/completions holds here too. The answer is
// written back as content blocks (thinking, text, tool_use) or as
// Anthropic's stream of events, and errors as Anthropic's error object.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_types.h"
#include "server/reply_format.h"

namespace shoal::server {

struct AnthropicRequest {
  GenerationRequest request;               // as a chat request
  std::vector<std::string> stop_sequences;  // the client's own: a match is stop_reason "stop_sequence"
};

// count_only: /v1/messages/count_tokens, where max_tokens and the sampling
// fields are not part of the request. Throws ApiError (400) naming the
// Anthropic field at fault.
AnthropicRequest parse_anthropic_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults,
                                         bool count_only = false);

// meta.id is a msg_… id; the format writes Messages' content blocks and events.
std::unique_ptr<ReplyFormat> anthropic_reply_format(const ResponseMeta& meta, std::vector<std::string> stop_sequences,
                                                    int n_prompt);

// {"type": "error", "error": {"type", "message"}}: Anthropic's error types
// by HTTP status (invalid_request_error, authentication_error,
// not_found_error, request_too_large, rate_limit_error, api_error,
// overloaded_error).
json anthropic_error_body(const ApiError& error);

}  // namespace shoal::server
