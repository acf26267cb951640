#pragma once
// OpenAI's Responses API (POST /v1/responses), which Codex CLI and the
// OpenAI Agents SDK's default model class speak. As with Anthropic's
// Messages, a Responses request is a chat request in other words: its
// input items (messages, function_call, function_call_output, reasoning)
// become chat messages, instructions the system turn, text.format the
// response_format, and the chat parser checks the rest. The answer is
// written as output items (reasoning, message, function_call) or as the
// Responses stream (response.created … response.completed). Nothing is
// stored: previous_response_id and conversation are refused by name.
#include <memory>

#include <nlohmann/json.hpp>

#include "server/openai_types.h"
#include "server/reply_format.h"

namespace shoal::server {

struct ResponsesRequest {
  GenerationRequest request;  // as a chat request
  // What the response object repeats of the request: instructions, tools,
  // tool_choice, text, reasoning, max_output_tokens, temperature, top_p,
  // parallel_tool_calls, store, metadata, truncation, user.
  json echo;
};

// Throws ApiError (400, OpenAI's error shape) naming the field at fault.
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body, const RequestDefaults& defaults);

// meta.id is a resp_… id.
std::unique_ptr<ReplyFormat> responses_reply_format(const ResponseMeta& meta, const Tokenizer& tokenizer, json echo);

}  // namespace shoal::server
