#include "server/http_server.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "server/anthropic_messages.h"
#include "server/web_assets.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal::server {
namespace {

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

// An error in the shape of the API the path belongs to: Anthropic's for
// /v1/messages (and count_tokens, with or without /v1), OpenAI's elsewhere.
// The routes and the front's own refusals (413, 408, …) both ask here.
std::string error_text(const ApiError& e, const std::string& path) {
  const bool anthropic = path.starts_with("/v1/messages") || path.starts_with("/messages");
  return dump(anthropic ? anthropic_error_body(e) : error_body(e));
}

void send_error(httplib::Response& res, const ApiError& e, const std::string& path = {}) {
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.status = e.status;
  res.set_content(error_text(e, path), "application/json");
}

// The key as OpenAI's clients send it (Authorization: Bearer KEY) or as
// Anthropic's do (x-api-key: KEY); empty when neither header is there.
std::optional<std::string> given_key(const httplib::Request& req) {
  if (req.has_header("x-api-key")) return req.get_header_value("x-api-key");
  const std::string auth = req.get_header_value("Authorization");
  if (auth.empty()) return std::nullopt;
  return auth.starts_with("Bearer ") ? auth.substr(7) : std::string();
}

std::string stem(const std::string& file) {
  return file.size() > 5 && file.ends_with(".gguf") ? file.substr(0, file.size() - 5) : file;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ServingContext::ServingContext(ServerOptions o, ServerState& s)
    : options(std::move(o)), state(s),
      model_id(options.alias.empty() ? std::filesystem::path(options.model_path).filename().string()
                                     : options.alias) {}

std::string ServingContext::echoed_model(const std::string& requested) const {
  return requested.empty() ? model_id : requested;
}

bool ServingContext::is_served_name(const std::string& name) const {
  const std::string file = std::filesystem::path(options.model_path).filename().string();
  return name == model_id || name == file || name == stem(file) || name == "default";
}

HttpServer::HttpServer(ServerOptions options, ServerState& state) : ctx_(std::move(options), state) {
  HttpLimits limits = ctx_.options.limits;
  limits.max_body_bytes = ctx_.options.body_limit;
  // A request being answered holds a handler thread (a stream for its whole
  // length, a queued one while it waits); connections still being read hold
  // none. Size the pool well above the slots.
  limits.handler_threads = std::max(limits.handler_threads, 4 * ctx_.options.parallel + 16);
  Metrics& metrics = ctx_.metrics;
  front_ = std::make_unique<HttpFront>(
      limits, [this](httplib::Request& req, httplib::Response& res) { dispatch(req, res); },
      [](int status, const std::string& message, const std::string& path) {
        const char* code = status == 413   ? "request_too_large"
                           : status == 408 ? "request_timeout"
                           : status == 431 ? "headers_too_large"
                           : status == 429 ? "too_many_connections"
                                           : "";
        return error_text(ApiError(status, message, status >= 500 ? "server_error" : "invalid_request_error", "", code),
                          path);
      },
      [&metrics](const httplib::Request& req, int status) {
        metrics.count_http(status);
        spdlog::debug("{} {} -> {}", req.method, req.path, status);
      });
  // Status never waits behind generation: a load balancer asks /health
  // while every generation handler is busy.
  front_->set_quick([](const httplib::Request& req) {
    return req.method == "GET" && (req.path == "/health" || req.path == "/metrics" || req.path == "/v1/cluster");
  });
  add_routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() { return front_->bind(ctx_.options.host, ctx_.options.port); }

void HttpServer::start() { front_->start(); }

void HttpServer::attach(Engine& engine, Scheduler& scheduler) {
  ctx_.engine.store(&engine);
  ctx_.scheduler.store(&scheduler);
  ctx_.metrics.start_rate_sampling(scheduler);
}

void HttpServer::stop() {
  if (Scheduler* s = ctx_.scheduler.load()) ctx_.in_flight.cancel_all(*s);
  front_->stop();
  ctx_.metrics.stop_rate_sampling();
}

void HttpServer::add(const std::string& method, const std::string& path, Handler handler) {
  routes_.push_back({method, std::regex(path), std::move(handler)});
}

void HttpServer::dispatch(httplib::Request& req, httplib::Response& res) {
  for (const Route& r : routes_) {
    if (r.method != req.method || !std::regex_match(req.path, req.matches, r.path)) continue;
    r.handler(req, res);
    return;
  }
  send_error(res, ApiError(404, fmt::format("Invalid URL ({} {})", req.method, req.path), "invalid_request_error",
                           "", "not_found"));
}

void HttpServer::add_routes() {
  ServingContext& ctx = ctx_;

  // Wraps an API route: the API key, loading state and errors in the API's shape.
  auto api = [&ctx](Handler handler, bool needs_model) -> Handler {
    return [&ctx, handler, needs_model](const httplib::Request& req, httplib::Response& res) {
      try {
        if (ctx.options.api_key) {
          const std::optional<std::string> sent = given_key(req);
          if (!sent)
            throw ApiError(401, "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' (or 'x-api-key: KEY').",
                           "invalid_request_error", "", "invalid_api_key");
          const std::string& key = *ctx.options.api_key;
          const std::string& given = *sent;
          // Constant time, so the key cannot be guessed byte by byte from timings.
          if (given.size() != key.size() || CRYPTO_memcmp(given.data(), key.data(), key.size()) != 0)
            throw ApiError(401, "Incorrect API key provided.", "invalid_request_error", "", "invalid_api_key");
        }
        if (needs_model && !ctx.engine.load()) {
          const ServerStatus status = ctx.state.status();
          std::string detail;
          if (status.progress && status.progress->total_bytes > 0)
            detail = fmt::format(" ({}: {:.0f}%)", status.progress->device,
                                 100.0 * status.progress->sent_bytes / status.progress->total_bytes);
          throw ApiError(503, "The model is loading; try again shortly" + detail + ".", "server_error", "",
                         "model_loading");
        }
        handler(req, res);
      } catch (const ApiError& e) {
        send_error(res, e, req.path);
      } catch (const Error& e) {
        send_error(res, ApiError(400, e.what()), req.path);
      } catch (const std::exception& e) {
        // A library's message is for the log, not for the client.
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(res, ApiError(500, "The server had an internal error.", "server_error"), req.path);
      }
    };
  };
  auto both = [this](const char* method, const std::string& path, const Handler& h) {
    for (const std::string& p : {path, path.substr(3)}) add(method, p, h);  // "/v1/x" and "/x"
  };

  both("POST", "/v1/chat/completions",
       api([&ctx](const auto& req, auto& res) { handle_generation(ctx, req, res, GenerationApi::Chat); }, true));
  add("POST", "/v1/completions",
      api([&ctx](const auto& req, auto& res) { handle_generation(ctx, req, res, GenerationApi::Completion); }, true));
  // As llama-server: /completion and /completions without /v1 are its own API, not OpenAI's.
  for (const char* path : {"/completion", "/completions"})
    add("POST", path, api([&ctx](const auto& req, auto& res) {
          handle_generation(ctx, req, res, GenerationApi::NativeCompletion);
        }, true));

  // llama-server's fill-in-the-middle, in its /completion shape.
  add("POST", "/infill",
      api([&ctx](const auto& req, auto& res) { handle_generation(ctx, req, res, GenerationApi::Infill); }, true));
  both("POST", "/v1/messages", api([&ctx](const auto& req, auto& res) {
         handle_generation(ctx, req, res, GenerationApi::AnthropicMessages);
       }, true));
  both("POST", "/v1/messages/count_tokens",
       api([&ctx](const auto& req, auto& res) { handle_count_tokens(ctx, req, res); }, true));
  both("POST", "/v1/responses",
       api([&ctx](const auto& req, auto& res) { handle_generation(ctx, req, res, GenerationApi::Responses); }, true));

  // llama-server's four paths for reranking.
  for (const char* path : {"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"})
    add("POST", path, api([&ctx](const auto& req, auto& res) { handle_rerank(ctx, req, res); }, true));

  both("POST", "/v1/embeddings", api([&ctx](const auto& req, auto& res) { handle_embeddings(ctx, req, res); }, true));
  add("POST", "/tokenize", api([&ctx](const auto& req, auto& res) { handle_tokenize(ctx, req, res); }, true));
  add("POST", "/detokenize", api([&ctx](const auto& req, auto& res) { handle_detokenize(ctx, req, res); }, true));
  add("GET", "/props", api([&ctx](const auto&, auto& res) { send_json(res, 200, props_json(ctx)); }, true));

  // llama-server's /apply-template: the prompt a chat request would give the
  // model, exactly as the template writes it (tools and tool calls included).
  add("POST", "/apply-template", api([&ctx](const auto& req, auto& res) {
        parse_json_body(req.body);  // its errors, in OpenAI's shape
        // Ordered: the template's tojson writes keys in the order the client sent them.
        const auto body = nlohmann::ordered_json::parse(req.body);
        ChatRenderRequest r;
        const auto messages = body.find("messages");
        if (messages == body.end() || !messages->is_array() || messages->empty())
          throw ApiError(400, "'messages' must be a non-empty array.", "invalid_request_error", "messages");
        r.messages = *messages;
        if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
          if (!tools->is_array()) throw ApiError(400, "'tools' must be an array.", "invalid_request_error", "tools");
          r.tools = *tools;
        }
        if (auto agp = body.find("add_generation_prompt"); agp != body.end()) {
          if (!agp->is_boolean())
            throw ApiError(400, "'add_generation_prompt' must be a boolean.", "invalid_request_error",
                           "add_generation_prompt");
          r.add_generation_prompt = agp->template get<bool>();
        }
        if (auto kw = body.find("chat_template_kwargs"); kw != body.end()) {
          if (!kw->is_object())
            throw ApiError(400, "'chat_template_kwargs' must be an object.", "invalid_request_error",
                           "chat_template_kwargs");
          r.kwargs = *kw;
        }
        send_json(res, 200, {{"prompt", ctx.engine.load()->chat_template().render_request(r)}});
      }, true));

  auto model_json = [&ctx] {
    Engine& engine = *ctx.engine.load();
    return json{{"id", ctx.model_id},
                {"object", "model"},
                {"created", unix_now()},
                {"owned_by", "shoal"},
                {"meta", {{"arch", engine.config().arch}, {"n_ctx", engine.n_ctx()},
                          {"n_layer", engine.config().n_layer}, {"n_vocab", engine.config().n_vocab}}}};
  };
  both("GET", "/v1/models", api([model_json](const auto&, auto& res) {
         send_json(res, 200, {{"object", "list"}, {"data", json::array({model_json()})}});
       }, true));
  both("GET", R"(/v1/models/(.+))", api([&ctx, model_json](const auto& req, auto& res) {
         const std::string name = req.matches[1].str();
         if (!ctx.is_served_name(name))
           throw ApiError(404, fmt::format("The model `{}` does not exist. This server serves `{}`.", name,
                                           ctx.model_id),
                          "invalid_request_error", "model", "model_not_found");
         send_json(res, 200, model_json());
       }, true));

  auto view = [&ctx](SchedulerStats& stats) {
    ClusterView v{ctx.state.status(), ctx.model_id, ctx.options.model_path, ctx.options.workers};
    v.engine = ctx.engine.load();
    if (Scheduler* s = ctx.scheduler.load()) {
      stats = s->stats();
      v.stats = &stats;
    }
    return v;
  };
  // Only under /v1: "/cluster" is the dashboard page.
  add("GET", "/v1/cluster", api([&ctx, view](const auto&, auto& res) {
            SchedulerStats stats;
            send_json(res, 200, ctx.metrics.cluster(view(stats)));
          }, false));
  add("GET", "/metrics", [&ctx, view](const httplib::Request&, httplib::Response& res) {
    SchedulerStats stats;
    res.set_content(ctx.metrics.prometheus(view(stats)), "text/plain; version=0.0.4; charset=utf-8");
  });

  add("GET", "/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    const ServerStatus s = ctx.state.status();
    // llama-server's word for a server that answers: "ok" (its docs and
    // load balancers' checks look for it); the others by phase.
    json body = {{"status", s.phase == Phase::Ready ? "ok" : phase_name(s.phase)}};
    if (s.phase == Phase::Loading) {
      body["progress"] = s.progress ? json{{"device", s.progress->device}, {"sent_bytes", s.progress->sent_bytes},
                                           {"total_bytes", s.progress->total_bytes},
                                           {"mib_per_s", s.progress->mib_per_s}}
                                    : json(nullptr);
    }
    if (s.phase == Phase::Degraded) body["reason"] = s.reason;
    if (Scheduler* sched = ctx.scheduler.load()) {
      const SchedulerStats st = sched->stats();
      body["slots"] = {{"total", st.slots}, {"active", st.active}, {"queued", st.queued}};
    }
    send_json(res, s.phase == Phase::Ready ? 200 : 503, body);
  });

  // The web UI, embedded in the binary.
  auto asset = [](const httplib::Request& req, httplib::Response& res) {
    const WebAsset* a = find_web_asset(req.path);
    if (!a) {
      send_error(res, ApiError(404, fmt::format("No such page: {}", req.path), "invalid_request_error", "",
                               "not_found"));
      return;
    }
    res.set_content(std::string(a->body), std::string(a->content_type));
  };
  add("GET", "/", asset);
  add("GET", "/cluster", asset);
  add("GET", R"(/static/.+)", asset);

}

}  // namespace shoal::server
