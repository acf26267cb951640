#pragma once
// Everything that knows OpenAI's JSON: request bodies of /v1/chat/completions
// and /v1/completions parsed into a GenerationRequest with every field type-
// and range-checked (a bad one is an ApiError naming the field), and the
// response objects, stream chunks and error bodies built back. Nothing here
// touches the engine; the routes (http_server.cpp, generation_routes.cpp)
// glue the two together.
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "tokenizer/chat_template.h"

namespace shoal::server {

using nlohmann::json;

// An error that leaves as {"error": {"message", "type", "param", "code"}}
// with its HTTP status. param and code are null in the body when empty.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
           std::string param = {}, std::string code = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;   // invalid_request_error, authentication_error, server_error, ...
  std::string param;  // the request field at fault
  std::string code;   // machine-readable: model_not_found, context_length_exceeded, ...
};

json error_body(int status, const std::string& message, const std::string& type = "invalid_request_error",
                const std::string& param = {}, const std::string& code = {});
inline json error_body(const ApiError& e) { return error_body(e.status, e.what(), e.type, e.param, e.code); }

// The server's defaults for what a request leaves out (the command line's
// sampling flags and -n, as llama-server does).
struct RequestDefaults {
  SamplingParams sampling;
  int max_tokens = -1;  // < 0: until an end token or the context is full
};

struct GenerationRequest {
  bool chat = false;
  std::string model;                  // as asked; empty when the body has none
  std::vector<ChatMessage> messages;  // chat: "developer" already mapped to "system"
  std::string prompt;                 // completions
  std::vector<TokenId> prompt_tokens; // llama-server's /completion: a prompt given as token ids (then `prompt` is empty)
  bool native = false;                // llama-server's /completion: its request fields and response shape
  std::vector<std::string> response_fields;  // llama-server's: the answer cut to these (a/b: b of a, as "a/b")
  GenerationOptions options;          // the request's stops only, not the template's
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<bool> reasoning;      // chat_template_kwargs.enable_thinking; unset: the server's --reasoning
  bool reasoning_opened = false;      // set by the route: the rendered prompt ends with the template's open marker
  // Chat through the model's Jinja template: the messages as sent (role
  // "developer" as "system", content parts joined into text), in the
  // client's key order; the offered tools (null when none, or with
  // tool_choice "none"), their names; chat_template_kwargs.
  nlohmann::ordered_json messages_json;
  nlohmann::ordered_json tools;
  std::vector<std::string> tool_names;
  bool parallel_tool_calls = true;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  // tool_choice "required" or a named function: the reply is a call,
  // grammar-constrained (server/tool_call_grammar.h); forced_tool names the
  // function, empty for any.
  bool tool_call_forced = false;
  std::string forced_tool;
  // response_format json_object / json_schema or `json_schema` (a schema;
  // json_object: {"type": "object"}), or `grammar` (GBNF text); the route
  // compiles them, with the offered tools, into options.grammar
  // (server/output_constraint.h). constrained_by names the parameter.
  nlohmann::ordered_json response_schema;  // null: none
  std::string gbnf;
  std::string constrained_by;
  // options.logprobs: chat's top_logprobs when logprobs is true, a
  // completion's logprobs count, or llama-server's n_probs; -1 when not asked.
  //
  // logit_bias as sent: a token id, or a text whose tokens all get the bias
  // (llama-server's form); the route resolves them against the vocabulary
  // into options.sampling.logit_bias (resolve_logit_bias).
  struct Bias {
    int64_t token = -1;  // -1: `text` instead
    std::string text;
    float bias = 0;      // -inf: banned (llama-server's false)
  };
  std::vector<Bias> logit_bias;
};

// Throws ApiError 400 for a body that is not a JSON object.
json parse_json_body(const std::string& body);
// `ordered`: the same body parsed keeping key order (what the template's
// tojson writes); null: taken from `body`.
GenerationRequest parse_chat_request(const json& body, const RequestDefaults& defaults,
                                     const nlohmann::ordered_json& ordered = nullptr);
GenerationRequest parse_completion_request(const json& body, const RequestDefaults& defaults,
                                           const nlohmann::ordered_json& ordered = nullptr);
// A chat request that another API's parser wrote (Anthropic's Messages,
// OpenAI's Responses), parsed as any chat request; its errors, and the
// output constraint's later ones, name the field the client sent:
// field_of maps the chat parser's names (max_tokens, response_format, …).
GenerationRequest parse_translated_chat(const nlohmann::ordered_json& chat, const RequestDefaults& defaults,
                                        const std::function<std::string(const std::string&)>& field_of);
// llama-server's native POST /completion: `prompt` a string, token ids, or
// an array of one of those; n_predict, n_probs, stream, cache_prompt and
// the common sampling fields.
GenerationRequest parse_native_completion_request(const json& body, const RequestDefaults& defaults,
                                                  const nlohmann::ordered_json& ordered = nullptr);

// logit_bias into options.sampling.logit_bias: ids checked against the
// vocabulary, texts tokenized (each of their tokens biased). Throws
// ApiError 400 naming logit_bias.
void resolve_logit_bias(GenerationRequest& g, const Tokenizer& tokenizer);

// What every response object and chunk of one request repeats.
struct ResponseMeta {
  std::string id;       // chatcmpl-… / cmpl-…
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool chat = false;
  bool thinks = false;  // chat with a thinking template: split out reasoning_content
  ReasoningMarkers reasoning_markers;  // where the template's output puts it
  bool reasoning_opened = false;       // the prompt ends inside the reasoning block (server/reasoning_splitter.h)
  int logprobs = -1;    // alternatives per token; -1: logprobs not asked
  std::vector<std::string> tools;  // offered tool names: the reply is read for calls (server/tool_calls.h)
  bool parallel_tool_calls = true;
  bool native = false;  // llama-server's /completion shape (native_completion_response, native_stream_chunk)
  std::vector<std::string> response_fields;  // native: only these fields of the whole answer; empty: all
};
// A choice's "logprobs" for `tokens`: chat's {"content": [{token, logprob,
// bytes, top_logprobs}]}, or a completion's {tokens, token_logprobs,
// top_logprobs, text_offset}; text_offset counts bytes from `offset`, which
// moves past these tokens. Null when logprobs were not asked.
json logprobs_json(const ResponseMeta& meta, const Tokenizer& tokenizer, const std::vector<TokenLogprob>& tokens,
                   size_t& offset);

ResponseMeta new_response_meta(bool chat, const std::string& model);
// PREFIX and 24 random letters and digits: ids need only be unique enough
// for a client to tell responses, items and calls apart.
std::string random_id(const char* prefix);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // llama-server's "timings" beside usage: the prompt's and the generation's
  // time, and the speculative guesses checked and right.
  int prompt_computed = 0;  // prompt tokens not reused from the slot's cache
  double prompt_seconds = 0, generation_seconds = 0;
  int drafted = 0, accepted = 0;
};

// The whole answer of a request without "stream".
// reasoning: a thinking model's reasoning_content (chat only; omitted when empty).
// logprobs: the choice's "logprobs" (logprobs_json), null when not asked.
// tool_calls: OpenAI's message.tool_calls (an array), null when none.
json completion_response(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                         const Usage& usage, const std::string& reasoning = {}, const json& logprobs = nullptr,
                         const json& tool_calls = nullptr);
// One chunk of a stream. Chat: role_chunk gives the opening
// {"role":"assistant","content":""}; text its content delta; finish_reason
// (non-empty) an empty delta that ends the choice. with_usage_null adds
// "usage": null, as OpenAI does on every chunk when include_usage is asked.
// tool_calls: a delta's tool_calls (an array of {index, id?, type?, function}).
json stream_chunk(const ResponseMeta& meta, std::string_view text, const std::string& finish_reason,
                  bool role_chunk, bool with_usage_null, std::string_view reasoning = {},
                  const json& logprobs = nullptr, const json& tool_calls = nullptr);
// llama-server's /completion answer: content, stop, stop_type (eos, word,
// limit) and stopping_word, tokens predicted and evaluated, timings, and
// completion_probabilities when n_probs asked (its own shape: id, token,
// bytes, logprob, top_logprobs).
json native_completion_response(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                                const std::string& stop_string, const Usage& usage, const Tokenizer& tokenizer,
                                const std::vector<TokenLogprob>& logprobs);
// One streamed piece of it ("stop": false); the stream ends with a
// native_completion_response of empty content.
json native_stream_chunk(const std::string& text, int n_prompt, const Tokenizer& tokenizer,
                         const std::vector<TokenLogprob>& logprobs);
// The last chunk when include_usage is asked: no choices, the usage.
json usage_chunk(const ResponseMeta& meta, const Usage& usage);
// "data: {json}\n\n"
std::string sse_event(const json& data);

// Dumps JSON, replacing invalid UTF-8 instead of throwing.
std::string dump(const json& value);

}  // namespace shoal::server
