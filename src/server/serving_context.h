#pragma once
// What every route shares: the server's options, its state and counters, the
// requests in flight, and — once loading is done — the engine and its
// scheduler. The engine and scheduler pointers are published once by
// attach() and stay valid until the HTTP server has stopped (its threads are
// joined before the serve command destroys them).
#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "server/http_front.h"
#include "server/in_flight.h"
#include "server/metrics.h"
#include "server/openai_types.h"
#include "server/server_state.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace shoal::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port
  std::optional<std::string> api_key; // required as "Authorization: Bearer KEY" on /v1/*
  size_t body_limit = 1 << 20;        // larger request bodies get 413
  int parallel = 1;                   // slots, to size the HTTP thread pool
  std::string model_path;
  std::string alias;                  // --alias: the name /v1/models lists (else the file name)
  std::vector<std::string> workers;   // --rpc, for /v1/cluster while loading
  RequestDefaults defaults;
  HttpLimits limits;                  // connections, deadlines, head size (body: body_limit)
};

struct ServingContext {
  ServingContext(ServerOptions o, ServerState& s);

  ServerOptions options;
  ServerState& state;
  Metrics metrics;
  InFlight in_flight;
  std::string model_id;  // --alias, or the GGUF file name
  std::atomic<Engine*> engine{nullptr};
  std::atomic<Scheduler*> scheduler{nullptr};

  // What a response names as its model: one model is served, so a request
  // may name it anything (clients send "gpt-4o-mini" by default), and that
  // name is echoed, as llama-server does; no name gives model_id.
  std::string echoed_model(const std::string& requested) const;
  // Whether GET /v1/models/NAME names this model: model_id, the file name
  // or its stem, or "default".
  bool is_served_name(const std::string& name) const;
};

// Every generation route: parse the API's request into a chat or completion
// request, render the chat template, tokenize, submit, answer in the API's
// shape (SSE or one JSON object; server/reply_format.h). Throws ApiError for
// the client's mistakes; the engine must be attached.
enum class GenerationApi {
  Chat,               // POST /v1/chat/completions
  Completion,         // POST /v1/completions (OpenAI's legacy)
  NativeCompletion,   // POST /completion and /completions (llama-server's own fields and shape)
  Infill,             // POST /infill (llama-server's fill-in-the-middle; its /completion shape)
  AnthropicMessages,  // POST /v1/messages (server/anthropic_messages.h)
  Responses,          // POST /v1/responses (server/openai_responses.h)
};
void handle_generation(ServingContext& ctx, const httplib::Request& req, httplib::Response& res, GenerationApi api);
// POST /v1/messages/count_tokens: {"input_tokens"}, the prompt the request would give the model.
void handle_count_tokens(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);

// POST /tokenize {content, add_special, with_pieces} → {tokens}; POST
// /detokenize {tokens} → {content}; GET /props: the model, its context and
// slots, its chat template and special tokens, the defaults, capabilities.
void handle_tokenize(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
nlohmann::json props_json(ServingContext& ctx);

// POST /v1/embeddings: {input, encoding_format?} → OpenAI's list of embeddings.
void handle_embeddings(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);
// POST /v1/rerank: {query, documents, top_n?} → the documents' relevance
// scores, best first (Jina's and Cohere's shape; `texts`: TEI's); a model
// without a ranking head is a 400 naming why.
void handle_rerank(ServingContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace shoal::server
