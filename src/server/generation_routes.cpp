// The two generation endpoints: OpenAI JSON in, a Scheduler request out,
// and the answer back either as one JSON object or as server-sent events.
// The HTTP thread blocks on the request's channel; the engine thread never
// waits for the client.
#include <httplib.h>

#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "server/http_front.h"
#include "server/output_constraint.h"
#include "server/reasoning_splitter.h"
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

// OpenAI's message.tool_calls; one call only when parallel calls are off.
json tool_calls_json(const ResponseMeta& meta, const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    if (!meta.parallel_tool_calls) break;
  }
  return out;
}

// A stream's tool calls, as OpenAI streams them: per call, a delta with its
// index, id, type, name and empty arguments, then the arguments in pieces.
std::vector<json> tool_call_deltas(const ResponseMeta& meta, const std::vector<ToolCall>& calls) {
  constexpr size_t kPiece = 24;
  std::vector<json> deltas;
  for (size_t i = 0; i < calls.size() && (meta.parallel_tool_calls || i == 0); ++i) {
    const ToolCall& c = calls[i];
    deltas.push_back(json::array({{{"index", i}, {"id", c.id}, {"type", "function"},
                                   {"function", {{"name", c.name}, {"arguments", ""}}}}}));
    for (size_t at = 0; at < c.arguments.size(); at += kPiece)
      deltas.push_back(json::array({{{"index", i}, {"function", {{"arguments", c.arguments.substr(at, kPiece)}}}}}));
  }
  return deltas;
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

void send_whole(ServingContext& ctx, httplib::Response& res, const std::shared_ptr<RequestChannel>& channel,
                uint64_t id, const ResponseMeta& meta, const Tokenizer& tokenizer) {
  // The client is watched while it waits for the whole answer: one that
  // leaves frees its slot at the next step, as a stream's does.
  std::string text;
  while (!channel->wait_done(kClientCheck)) {
    if (HttpFront::client_gone()) {
      channel->close();
      ctx.scheduler.load()->cancel(id);
      ctx.in_flight.remove(id);
      return;  // nobody to answer
    }
  }
  RequestChannel::Taken taken = channel->take(std::chrono::milliseconds(0));
  text = std::move(taken.text);
  ctx.in_flight.remove(id);
  const RequestResult r = channel->result();
  if (const auto failure = failure_of(r)) throw *failure;
  std::string reasoning;
  if (meta.thinks) {
    ReasoningSplitter split(meta.reasoning_markers);
    ReasoningSplitter::Parts a = split.feed(text), b = split.finish();
    reasoning = a.reasoning + b.reasoning;
    text = a.content + b.content;
  }
  json calls = nullptr;
  std::string finish = r.finish_reason;
  if (!meta.tools.empty()) {
    ToolReply reply = parse_tool_calls(text, meta.tools);
    if (!reply.calls.empty()) {
      text = reply.content;
      calls = tool_calls_json(meta, reply.calls);
      if (finish == "stop") finish = "tool_calls";
    }
  }
  res.status = 200;
  if (meta.native) {
    res.set_content(dump(native_completion_response(meta, text, r.finish_reason, r.stop_string, usage_of(r), tokenizer,
                                                    taken.logprobs)),
                    "application/json");
    return;
  }
  size_t offset = 0;
  res.set_content(dump(completion_response(meta, text, finish, usage_of(r), reasoning,
                                           logprobs_json(meta, tokenizer, taken.logprobs, offset), calls)),
                  "application/json");
}

// Per-stream state the content provider keeps between its calls.
struct StreamState {
  std::shared_ptr<RequestChannel> channel;
  uint64_t id = 0;
  ResponseMeta meta;
  bool include_usage = false;
  bool opened = false;
  ReasoningSplitter split;  // used when meta.thinks
  const Tokenizer* tokenizer = nullptr;
  std::vector<TokenLogprob> logprobs;  // taken, not yet sent (their text is held back)
  size_t text_offset = 0;
  ToolCallSplitter tools;  // used when tools are offered
  int n_prompt = 0;        // llama-server's tokens_evaluated
};

void send_stream(ServingContext& ctx, httplib::Response& res, std::shared_ptr<RequestChannel> channel, uint64_t id,
                 const ResponseMeta& meta, bool include_usage, const Tokenizer& tokenizer, int n_prompt) {
  auto st = std::make_shared<StreamState>();
  st->n_prompt = n_prompt;
  st->tokenizer = &tokenizer;
  st->channel = std::move(channel);
  st->id = id;
  st->meta = meta;
  st->split = ReasoningSplitter(meta.reasoning_markers);
  st->tools = ToolCallSplitter(meta.tools);
  st->include_usage = include_usage;
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // no buffering in a reverse proxy
  Scheduler* scheduler = ctx.scheduler.load();
  // httplib calls this again and again until sink.done(); each call blocks
  // until there is something to send. Returning false drops the connection.
  auto provider = [st, scheduler](size_t, httplib::DataSink& sink) -> bool {
    auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
    auto gone = [&] {
      // Free the slot now: on_text says so at the next token, and cancel()
      // covers a request still queued or in prefill.
      st->channel->close();
      scheduler->cancel(st->id);
      return false;
    };
    if (!st->opened) {
      st->opened = true;
      // The first chat chunk carries the role, as OpenAI's does.
      if (st->meta.chat && !write(sse_event(stream_chunk(st->meta, "", "", true, st->include_usage))))
        return gone();
      return true;
    }
    RequestChannel::Taken t = st->channel->take(kKeepAlive);
    for (auto& lp : t.logprobs) st->logprobs.push_back(std::move(lp));
    // The logprobs of the tokens taken so far go with the next chunk sent.
    auto logprobs = [&] {
      json j = logprobs_json(st->meta, *st->tokenizer, st->logprobs, st->text_offset);
      st->logprobs.clear();
      return j;
    };
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
      }
    }
    if (!parts.reasoning.empty() &&
        !write(sse_event(stream_chunk(st->meta, "", "", false, st->include_usage, parts.reasoning, logprobs()))))
      return gone();
    if (st->meta.native) {  // llama-server's /completion: its own pieces, its own last object, no [DONE]
      if (!parts.content.empty() &&
          !write(sse_event(native_stream_chunk(parts.content, st->n_prompt, *st->tokenizer, st->logprobs))))
        return gone();
      st->logprobs.clear();
      if (!t.done) {
        if (parts.content.empty() && !write(": keep-alive\n\n")) return gone();
        return true;
      }
      const RequestResult r = st->channel->result();
      if (const auto failure = failure_of(r)) write(sse_event(error_body(*failure)));
      else write(sse_event(native_completion_response(st->meta, "", r.finish_reason, r.stop_string, usage_of(r),
                                                      *st->tokenizer, {})));
      sink.done();
      return true;
    }
    if (!parts.content.empty()) {
      if (!write(sse_event(stream_chunk(st->meta, parts.content, "", false, st->include_usage, {}, logprobs()))))
        return gone();
    } else if (!t.done && parts.reasoning.empty()) {
      if (!write(": keep-alive\n\n")) return gone();
    }
    if (!t.done) return true;

    const RequestResult r = st->channel->result();
    // Headers are out with 200; OpenAI's clients raise on an "error" event.
    if (const auto failure = failure_of(r)) {
      write(sse_event(error_body(*failure)));
    } else {
      for (const json& delta : tool_call_deltas(st->meta, calls))
        write(sse_event(stream_chunk(st->meta, "", "", false, st->include_usage, {}, nullptr, delta)));
      const std::string finish = !calls.empty() && r.finish_reason == "stop" ? "tool_calls" : r.finish_reason;
      json rest = st->logprobs.empty() ? json(nullptr) : logprobs();
      write(sse_event(stream_chunk(st->meta, "", finish, false, st->include_usage, {}, rest)));
      if (st->include_usage) write(sse_event(usage_chunk(st->meta, usage_of(r))));
      write("data: [DONE]\n\n");
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

}  // namespace

void handle_generation(ServingContext& ctx, const httplib::Request& req, httplib::Response& res, GenerationApi api) {
  const bool chat = api == GenerationApi::Chat;
  Engine& engine = *ctx.engine.load();
  if (engine.supervisor()) {
    const ServerStatus status = ctx.state.status();
    if (status.phase == Phase::Degraded) throw unavailable(status.reason);
  }
  const json body = parse_json_body(req.body);
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(req.body);
  GenerationRequest g = chat                              ? parse_chat_request(body, ctx.options.defaults, ordered)
                        : api == GenerationApi::Completion ? parse_completion_request(body, ctx.options.defaults, ordered)
                                                           : parse_native_completion_request(body, ctx.options.defaults, ordered);
  resolve_logit_bias(g, engine.tokenizer());
  compile_output_constraint(g, engine.chat_template().source());
  if (!g.tool_names.empty()) {  // the families' markers must reach the tool-call parser
    const Tokenizer& tok = engine.tokenizer();
    for (const std::string& marker : tool_call_markers()) {
      const auto id = tok.find_token(marker);
      if (id && tok.is_control(*id)) g.options.shown_tokens.push_back(*id);
    }
  }
  std::vector<TokenId> prompt = build_prompt(engine, g);
  const size_t n_prompt = prompt.size();
  ResponseMeta meta = new_response_meta(chat, ctx.echoed_model(g.model));
  meta.thinks = chat && engine.chat_template().thinks();
  meta.reasoning_markers = engine.chat_template().reasoning_markers();
  meta.logprobs = g.options.logprobs;
  meta.tools = g.tool_names;
  meta.parallel_tool_calls = g.parallel_tool_calls;
  meta.native = g.native;

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
  if (g.stream)
    send_stream(ctx, res, std::move(channel), *id, meta, g.include_usage, engine.tokenizer(), static_cast<int>(n_prompt));
  else send_whole(ctx, res, channel, *id, meta, engine.tokenizer());
}

}  // namespace shoal::server
