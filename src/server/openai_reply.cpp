// OpenAI's chat completions and legacy completions, and llama-server's
// /completion (and /infill), as one ReplyFormat: the response objects and
// chunks themselves are built in openai_response.cpp.
#include "server/reply_format.h"

namespace shoal::server {
namespace {

// OpenAI's message.tool_calls.
json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls)
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

// A stream's tool calls, as OpenAI streams them: per call, a delta with its
// index, id, type, name and empty arguments, then the arguments in pieces.
std::vector<json> tool_call_deltas(const std::vector<ToolCall>& calls) {
  constexpr size_t kPiece = 24;
  std::vector<json> deltas;
  for (size_t i = 0; i < calls.size(); ++i) {
    const ToolCall& c = calls[i];
    deltas.push_back(json::array({{{"index", i}, {"id", c.id}, {"type", "function"},
                                   {"function", {{"name", c.name}, {"arguments", ""}}}}}));
    for (size_t at = 0; at < c.arguments.size(); at += kPiece)
      deltas.push_back(json::array({{{"index", i}, {"function", {{"arguments", c.arguments.substr(at, kPiece)}}}}}));
  }
  return deltas;
}

// OpenAI's finish reason: a reply that ended by itself with calls ended for them.
std::string finish_of(const Reply& r) {
  return !r.calls.empty() && r.finish_reason == "stop" ? "tool_calls" : r.finish_reason;
}

// llama-server's response_fields: each named field, "a/b" for b inside a
// (kept under the name "a/b"); a field the answer lacks is left out.
json only_fields(json answer, const std::vector<std::string>& fields) {
  if (fields.empty()) return answer;
  json out = json::object();
  for (const std::string& path : fields) {
    const json* at = &answer;
    for (size_t begin = 0; at && begin <= path.size();) {
      const size_t end = std::min(path.find('/', begin), path.size());
      const std::string key = path.substr(begin, end - begin);
      at = at->is_object() && at->contains(key) ? &(*at)[key] : nullptr;
      begin = end + 1;
    }
    if (at) out[path] = *at;
  }
  return out;
}

class OpenAiReplyFormat : public ReplyFormat {
 public:
  OpenAiReplyFormat(const ResponseMeta& meta, const Tokenizer& tokenizer, bool include_usage, int n_prompt)
      : meta_(meta), tokenizer_(tokenizer), include_usage_(include_usage), n_prompt_(n_prompt) {}

  json whole(const Reply& r) override {
    if (meta_.native)
      return only_fields(native_completion_response(meta_, r.content, r.finish_reason, r.stop_string, r.usage,
                                                    tokenizer_, r.logprobs),
                         meta_.response_fields);
    size_t offset = 0;
    return completion_response(meta_, r.content, finish_of(r), r.usage, r.reasoning,
                               logprobs_json(meta_, tokenizer_, r.logprobs, offset),
                               r.calls.empty() ? json(nullptr) : tool_calls_json(r.calls));
  }

  std::string open() override {
    // The first chat chunk carries the role, as OpenAI's does.
    return meta_.chat ? sse_event(stream_chunk(meta_, "", "", true, include_usage_)) : std::string();
  }

  std::string delta(std::string_view reasoning, std::string_view content,
                    std::vector<TokenLogprob>& logprobs) override {
    std::string out;
    if (meta_.native) {  // llama-server's pieces: "stop": false, the prompt's size
      if (content.empty()) return out;
      out = sse_event(native_stream_chunk(std::string(content), n_prompt_, tokenizer_, logprobs));
      logprobs.clear();
      return out;
    }
    // The logprobs of the tokens taken so far go with the next chunk sent.
    if (!reasoning.empty())
      out += sse_event(stream_chunk(meta_, "", "", false, include_usage_, reasoning, take_logprobs(logprobs)));
    if (!content.empty())
      out += sse_event(stream_chunk(meta_, content, "", false, include_usage_, {}, take_logprobs(logprobs)));
    return out;
  }

  std::string finish(const Reply& r) override {
    if (meta_.native)  // its own last object, no [DONE]
      return sse_event(native_completion_response(meta_, "", r.finish_reason, r.stop_string, r.usage, tokenizer_, {}));
    std::string out;
    for (const json& delta : tool_call_deltas(r.calls))
      out += sse_event(stream_chunk(meta_, "", "", false, include_usage_, {}, nullptr, delta));
    out += sse_event(stream_chunk(meta_, "", finish_of(r), false, include_usage_, {},
                                  r.logprobs.empty() ? json(nullptr)
                                                     : logprobs_json(meta_, tokenizer_, r.logprobs, text_offset_)));
    if (include_usage_) out += sse_event(usage_chunk(meta_, r.usage));
    return out + "data: [DONE]\n\n";
  }

  // Headers are out with 200; OpenAI's clients raise on an "error" event.
  std::string failure(const ApiError& e) override { return sse_event(error_body(e)); }

 private:
  json take_logprobs(std::vector<TokenLogprob>& logprobs) {
    json j = logprobs_json(meta_, tokenizer_, logprobs, text_offset_);
    logprobs.clear();
    return j;
  }

  ResponseMeta meta_;
  const Tokenizer& tokenizer_;
  bool include_usage_;
  int n_prompt_;             // llama-server's tokens_evaluated
  size_t text_offset_ = 0;   // the legacy logprobs' text_offset
};

}  // namespace

std::unique_ptr<ReplyFormat> openai_reply_format(const ResponseMeta& meta, const Tokenizer& tokenizer,
                                                 bool include_usage, int n_prompt) {
  return std::make_unique<OpenAiReplyFormat>(meta, tokenizer, include_usage, n_prompt);
}

std::string named_sse_event(std::string_view name, const json& data) {
  return "event: " + std::string(name) + "\ndata: " + dump(data) + "\n\n";
}

}  // namespace shoal::server
