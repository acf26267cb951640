// The two generation endpoints: OpenAI JSON in, a Scheduler request out,
// and the answer back either as one JSON object or as server-sent events.
// The HTTP thread blocks on the request's channel; the engine thread never
// waits for the client.
#include <httplib.h>

#include <cctype>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "server/anthropic_messages.h"
#include "server/http_front.h"
#include "server/infill_prompt.h"
#include "server/openai_responses.h"
#include "server/output_constraint.h"
#include "server/reasoning_splitter.h"
#include "server/reply_format.h"
#include "server/tool_calls.h"
#include "server/request_channel.h"
#include "server/serving_context.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal::server {
namespace {

// An SSE comment every so often while nothing else is sent (queued, long
// prefill): clients ignore it, and writing it finds a client that went away.
constexpr auto kKeepAlive = std::chrono::milliseconds(1000);
// How often a non-streaming request looks whether its client is still there:
// about a decode step.
constexpr auto kClientCheck = std::chrono::milliseconds(10);

// The prompt the engine sees: the chat rendered with the model's template
// (its end-of-turn markers become stop strings), or the completion prompt,
// tokenized with special-token parsing as `shoal run` does.
std::vector<TokenId> tokenized_prompt(Engine& engine, GenerationRequest& g) {
  if (!g.prompt_tokens.empty()) {  // llama-server's /completion with token ids: as given
    for (TokenId id : g.prompt_tokens)
      if (id >= engine.tokenizer().n_vocab())
        throw ApiError(400, fmt::format("Invalid 'prompt': token {} is outside the vocabulary of {} tokens.", id,
                                        engine.tokenizer().n_vocab()),
                       "invalid_request_error", "prompt", "invalid_value");
    return g.prompt_tokens;
  }
  std::string text = g.prompt;
  if (g.chat) {
    try {
      ChatRenderRequest r;
      r.messages = g.messages_json;
      r.tools = g.tools;
      r.kwargs = g.template_kwargs;
      // Output held to a grammar leaves no room for a <think> block: a
      // thinking template is asked for the answer alone unless the client
      // said otherwise.
      const bool think = g.reasoning.value_or(engine.options().reasoning && !g.options.grammar);
      if (!r.kwargs.contains("enable_thinking")) r.kwargs["enable_thinking"] = think;
      text = engine.chat_template().render_prompt(r);
      // QwQ's and DeepSeek R1's templates open the block themselves: the
      // output starts inside it.
      if (engine.chat_template().thinks()) {
        std::string_view end = text;
        while (!end.empty() && std::isspace(static_cast<unsigned char>(end.back()))) end.remove_suffix(1);
        g.reasoning_opened = end.ends_with(engine.chat_template().reasoning_markers().open);
      }
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "invalid_request_error", "messages", "invalid_value");
    }
    for (const auto& s : engine.chat_template().stop_strings()) g.options.stop.push_back(s);
  }
  return engine.tokenizer().encode(text, true, true);
}

std::vector<TokenId> build_prompt(Engine& engine, GenerationRequest& g) {
  std::vector<TokenId> prompt = tokenized_prompt(engine, g);
  const char* param = g.chat ? "messages" : "prompt";
  if (prompt.empty()) throw ApiError(400, "The prompt is empty.", "invalid_request_error", param, "invalid_value");
  // The last prompt position must leave room for at least one new token.
  if (static_cast<int>(prompt.size()) >= engine.n_ctx())
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, your {} resulted in {} "
                               "tokens.",
                               engine.n_ctx(), g.chat ? "messages" : "prompt", prompt.size()),
                   "invalid_request_error", param, "context_length_exceeded");
  return prompt;
}

ApiError engine_error(const RequestResult& r) {
  // What the request itself asked for stopped it (a grammar past its work
  // bound): the client's to fix, and the server is fine.
  if (r.request_fault)
    return ApiError(400, "The request was stopped while generating: " + r.error, "invalid_request_error", "",
                    "request_stopped");
  return ApiError(500, "The engine failed while generating: " + r.error, "server_error", "", "engine_error");
}

// The cluster lost what it needs to hold the model; the server stays up and
// heals when workers come back.
ApiError unavailable(const std::string& reason) {
  return ApiError(503, "The cluster cannot run the model now: " + reason, "server_error", "", "cluster_unavailable");
}

ApiError shutting_down() {
  return ApiError(503, "The server is shutting down.", "server_error", "", "shutting_down");
}

// What a request that did not end normally answers with; none when it did.
std::optional<ApiError> failure_of(const RequestResult& r) {
  if (r.finish_reason == "unavailable") return unavailable(r.error);
  if (r.finish_reason == "error") return engine_error(r);
  if (r.finish_reason == "cancelled") return shutting_down();  // the server is stopping
  return std::nullopt;
}

Usage usage_of(const RequestResult& r) {
  return Usage{r.n_prompt, static_cast<int>(r.tokens.size()), r.n_prompt - r.n_reused, r.prompt_seconds,
               r.generation_seconds, r.drafted, r.accepted};
}

// What the model's text says: a thinking model's reasoning split out, the
// tool calls read (the first alone when parallel calls are off).
struct SplitText {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};
SplitText split_text(const ResponseMeta& meta, std::string text) {
  SplitText out;
  if (meta.thinks) {
    ReasoningSplitter split(meta.reasoning_markers, meta.reasoning_opened);
    ReasoningSplitter::Parts a = split.feed(text), b = split.finish();
    out.reasoning = a.reasoning + b.reasoning;
    text = a.content + b.content;
  }
  if (!meta.tools.empty()) {
    ToolReply reply = parse_tool_calls(text, meta.tools);
    if (!reply.calls.empty()) {
      text = reply.content;
      out.calls = std::move(reply.calls);
      if (!meta.parallel_tool_calls) out.calls.resize(1);
    }
  }
  out.content = std::move(text);
  return out;
}

void send_whole(ServingContext& ctx, httplib::Response& res, const std::shared_ptr<RequestChannel>& channel,
                uint64_t id, const ResponseMeta& meta, ReplyFormat& format) {
  // The client is watched while it waits for the whole answer: one that
  // leaves frees its slot at the next step, as a stream's does.
  while (!channel->wait_done(kClientCheck)) {
    if (HttpFront::client_gone()) {
      channel->close();
      ctx.scheduler.load()->cancel(id);
      ctx.in_flight.remove(id);
      return;  // nobody to answer
    }
  }
  RequestChannel::Taken taken = channel->take(std::chrono::milliseconds(0));
  ctx.in_flight.remove(id);
  const RequestResult r = channel->result();
  if (const auto failure = failure_of(r)) throw *failure;
  SplitText parts = split_text(meta, std::move(taken.text));
  Reply reply{std::move(parts.content), std::move(parts.reasoning), std::move(parts.calls), r.finish_reason,
              r.stop_string, usage_of(r), std::move(taken.logprobs)};
  res.status = 200;
  res.set_content(dump(format.whole(reply)), "application/json");
}

// Per-stream state the content provider keeps between its calls.
struct StreamState {
  std::shared_ptr<RequestChannel> channel;
  uint64_t id = 0;
  ResponseMeta meta;
  std::unique_ptr<ReplyFormat> format;
  bool opened = false;
  ReasoningSplitter split;  // used when meta.thinks
  std::vector<TokenLogprob> logprobs;  // taken, not yet sent (their text is held back)
  ToolCallSplitter tools;  // used when tools are offered
};

void send_stream(ServingContext& ctx, httplib::Response& res, std::shared_ptr<RequestChannel> channel, uint64_t id,
                 const ResponseMeta& meta, std::unique_ptr<ReplyFormat> format) {
  auto st = std::make_shared<StreamState>();
  st->channel = std::move(channel);
  st->id = id;
  st->meta = meta;
  st->format = std::move(format);
  st->split = ReasoningSplitter(meta.reasoning_markers, meta.reasoning_opened);
  st->tools = ToolCallSplitter(meta.tools);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // no buffering in a reverse proxy
  Scheduler* scheduler = ctx.scheduler.load();
  // httplib calls this again and again until sink.done(); each call blocks
  // until there is something to send. Returning false drops the connection.
  auto provider = [st, scheduler](size_t, httplib::DataSink& sink) -> bool {
    auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
    auto gone = [&] {
      // Free the slot now: on_text says so at the next token, and cancel()
      // covers a request still queued or in prefill.
      st->channel->close();
      scheduler->cancel(st->id);
      return false;
    };
    if (!st->opened) {
      st->opened = true;
      return write(st->format->open()) || gone();
    }
    RequestChannel::Taken t = st->channel->take(kKeepAlive);
    for (auto& lp : t.logprobs) st->logprobs.push_back(std::move(lp));
    ReasoningSplitter::Parts parts{{}, t.text};
    if (st->meta.thinks) {
      parts = st->split.feed(t.text);
      if (t.done) {
        ReasoningSplitter::Parts rest = st->split.finish();
        parts.reasoning += rest.reasoning;
        parts.content += rest.content;
      }
    }
    std::vector<ToolCall> calls;
    if (!st->meta.tools.empty()) {  // content flows until a call may be starting
      parts.content = st->tools.feed(parts.content);
      if (t.done) {
        ToolReply reply = st->tools.finish();
        parts.content += reply.content;
        calls = std::move(reply.calls);
        if (!st->meta.parallel_tool_calls && calls.size() > 1) calls.resize(1);
      }
    }
    const std::string sent = st->format->delta(parts.reasoning, parts.content, st->logprobs);
    if (!write(sent)) return gone();
    if (!t.done) {
      if (sent.empty() && !write(": keep-alive\n\n")) return gone();
      return true;
    }
    const RequestResult r = st->channel->result();
    if (const auto failure = failure_of(r)) {
      write(st->format->failure(*failure));
    } else {
      write(st->format->finish(Reply{{}, {}, std::move(calls), r.finish_reason, r.stop_string, usage_of(r),
                                     std::move(st->logprobs)}));
    }
    sink.done();
    return true;
  };
  // Runs when the response is destroyed: whatever happened to the stream,
  // the request must not outlive it.
  auto release = [st, scheduler, &ctx](bool) {
    if (!st->channel->done()) {
      st->channel->close();
      scheduler->cancel(st->id);
    }
    ctx.in_flight.remove(st->id);
  };
  res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(release));
}

// A request of any of the generation APIs as the engine takes it, and how
// its answer is written.
struct ParsedRequest {
  GenerationRequest g;
  std::function<std::unique_ptr<ReplyFormat>(const ResponseMeta&, int n_prompt)> format;
  const char* id_prefix = nullptr;  // the API's own response ids (msg_, resp_); null: OpenAI's chat/completion ids
};

ParsedRequest parse_request(ServingContext& ctx, Engine& engine, const std::string& text, GenerationApi api) {
  json body = parse_json_body(text);
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
  const RequestDefaults& defaults = ctx.options.defaults;
  const Tokenizer& tokenizer = engine.tokenizer();
  ParsedRequest p;
  auto openai = [&tokenizer](const GenerationRequest& g) {
    return [&tokenizer, include_usage = g.include_usage](const ResponseMeta& meta, int n_prompt) {
      return openai_reply_format(meta, tokenizer, include_usage, n_prompt);
    };
  };
  switch (api) {
    case GenerationApi::Chat:
      p.g = parse_chat_request(body, defaults, ordered);
      break;
    case GenerationApi::Completion:
      p.g = parse_completion_request(body, defaults, ordered);
      break;
    case GenerationApi::NativeCompletion:
      p.g = parse_native_completion_request(body, defaults, ordered);
      break;
    case GenerationApi::Infill: {
      // The rest of an /infill request is a /completion request.
      const InfillInput input = take_infill_input(body);
      for (const char* key : {"input_prefix", "input_suffix", "input_extra", "prompt"}) ordered.erase(key);
      body["prompt"] = ordered["prompt"] = "";
      p.g = parse_native_completion_request(body, defaults, ordered);
      p.g.prompt_tokens = infill_prompt(tokenizer, input, defaults.max_tokens, engine.n_ctx());
      break;
    }
    case GenerationApi::AnthropicMessages: {
      AnthropicRequest a = parse_anthropic_request(ordered, defaults);
      p.g = std::move(a.request);
      p.format = [stops = std::move(a.stop_sequences)](const ResponseMeta& meta, int n_prompt) {
        return anthropic_reply_format(meta, stops, n_prompt);
      };
      p.id_prefix = "msg_";
      return p;
    }
    case GenerationApi::Responses: {
      ResponsesRequest r = parse_responses_request(ordered, defaults);
      p.g = std::move(r.request);
      p.format = [&tokenizer, echo = std::move(r.echo)](const ResponseMeta& meta, int) {
        return responses_reply_format(meta, tokenizer, echo);
      };
      p.id_prefix = "resp_";
      return p;
    }
  }
  p.format = openai(p.g);
  return p;
}

// What every route does once its request is parsed: the logit bias and the
// output constraint resolved against the model, the tool-call markers shown.
void prepare(Engine& engine, GenerationRequest& g) {
  resolve_logit_bias(g, engine.tokenizer());
  compile_output_constraint(g, engine.chat_template().source());
  if (!g.tool_names.empty()) {  // the families' markers must reach the tool-call parser
    const Tokenizer& tok = engine.tokenizer();
    for (const std::string& marker : tool_call_markers()) {
      const auto id = tok.find_token(marker);
      if (id && tok.is_control(*id)) g.options.shown_tokens.push_back(*id);
    }
  }
}

}  // namespace

void handle_generation(ServingContext& ctx, const httplib::Request& req, httplib::Response& res, GenerationApi api) {
  Engine& engine = *ctx.engine.load();
  if (engine.supervisor()) {
    const ServerStatus status = ctx.state.status();
    if (status.phase == Phase::Degraded) throw unavailable(status.reason);
  }
  ParsedRequest parsed = parse_request(ctx, engine, req.body, api);
  GenerationRequest& g = parsed.g;
  prepare(engine, g);
  std::vector<TokenId> prompt = build_prompt(engine, g);
  const size_t n_prompt = prompt.size();
  ResponseMeta meta = new_response_meta(g.chat, ctx.echoed_model(g.model));
  if (parsed.id_prefix) meta.id = random_id(parsed.id_prefix);
  meta.thinks = g.chat && engine.chat_template().thinks();
  meta.reasoning_markers = engine.chat_template().reasoning_markers();
  meta.reasoning_opened = g.reasoning_opened;
  meta.logprobs = g.options.logprobs;
  meta.tools = g.tool_names;
  meta.parallel_tool_calls = g.parallel_tool_calls;
  meta.native = g.native;
  meta.response_fields = g.response_fields;

  auto channel = std::make_shared<RequestChannel>();
  Metrics& metrics = ctx.metrics;
  ServerState& state = ctx.state;
  Request request = channel_request(channel, std::move(prompt), g.options, [&metrics, &state](const RequestResult& r) {
    metrics.count_finished(r);
    // Prompts are checked above, so an error here is the engine's (a lost
    // worker, say): later requests are likely to fail the same way.
    if (r.finish_reason == "error" && !r.request_fault) state.set_degraded(r.error);
  });
  std::optional<uint64_t> id = ctx.in_flight.submit(*ctx.scheduler.load(), std::move(request));
  if (!id) throw shutting_down();
  spdlog::debug("request {} ({}): {} prompt tokens, stream {}", *id, meta.id, n_prompt, g.stream);
  std::unique_ptr<ReplyFormat> format = parsed.format(meta, static_cast<int>(n_prompt));
  if (g.stream) send_stream(ctx, res, std::move(channel), *id, meta, std::move(format));
  else send_whole(ctx, res, channel, *id, meta, *format);
}

void handle_count_tokens(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Engine& engine = *ctx.engine.load();
  parse_json_body(req.body);  // its errors first
  AnthropicRequest a = parse_anthropic_request(nlohmann::ordered_json::parse(req.body), ctx.options.defaults, true);
  prepare(engine, a.request);
  res.status = 200;
  res.set_content(dump(json{{"input_tokens", tokenized_prompt(engine, a.request).size()}}), "application/json");
}

}  // namespace shoal::server
