#pragma once
// How one generation's answer is written for the API that asked for it.
// Every generation route shares one request path (generation_routes.cpp):
// the model's text is split into reasoning, content and tool calls there,
// and a ReplyFormat writes those pieces in its API's shape: OpenAI's chat
// and legacy completions, llama-server's /completion and /infill,
// Anthropic's Messages, OpenAI's Responses. A format is made per request
// and may keep state between the pieces of a stream (block indexes,
// sequence numbers, offsets).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_types.h"
#include "server/tool_calls.h"

namespace shoal::server {

// The end of a request, as the formats need it.
struct Reply {
  std::string content;              // whole: all of it; stream: empty (sent as deltas)
  std::string reasoning;            // a thinking model's (whole only)
  std::vector<ToolCall> calls;      // read out of the text; one at most when parallel calls are off
  std::string finish_reason;        // the engine's: "stop" or "length"
  std::string stop_string;          // the stop string that ended it; empty for an end token
  Usage usage;
  std::vector<TokenLogprob> logprobs;  // whole: every token's; stream: those not sent yet
};

class ReplyFormat {
 public:
  virtual ~ReplyFormat() = default;
  // A request without "stream": the response body.
  virtual json whole(const Reply& reply) = 0;
  // A stream, as server-sent-event text ("" sends nothing): what opens it,
  // each new piece of reasoning and content (with the logprobs of the tokens
  // behind them, which a format takes as it sends them), its normal end,
  // and an end in failure once the headers are out.
  virtual std::string open() = 0;
  virtual std::string delta(std::string_view reasoning, std::string_view content,
                            std::vector<TokenLogprob>& logprobs) = 0;
  virtual std::string finish(const Reply& reply) = 0;
  virtual std::string failure(const ApiError& error) = 0;
};

// OpenAI's chat completions and legacy completions (meta.chat), or
// llama-server's /completion shape (meta.native).
std::unique_ptr<ReplyFormat> openai_reply_format(const ResponseMeta& meta, const Tokenizer& tokenizer,
                                                 bool include_usage, int n_prompt);

// "event: NAME\ndata: {json}\n\n", as Anthropic's and the Responses API's streams are written.
std::string named_sse_event(std::string_view name, const json& data);

}  // namespace shoal::server
