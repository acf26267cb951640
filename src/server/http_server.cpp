#include "server/http_server.h"

#include <httplib.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

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

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  send_json(res, e.status, error_body(e));
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
      model_id(std::filesystem::path(options.model_path).filename().string()) {}

void ServingContext::check_model(const std::string& name) const {
  if (name.empty() || name == model_id || name == stem(model_id) || name == "default") return;
  throw ApiError(404, fmt::format("The model `{}` does not exist. This server serves `{}`.", name, model_id),
                 "invalid_request_error", "model", "model_not_found");
}

HttpServer::HttpServer(ServerOptions options, ServerState& state)
    : ctx_(std::move(options), state), server_(std::make_unique<httplib::Server>()) {
  // Every request in flight holds an HTTP thread (streams for their whole
  // length, queued ones while they wait), and idle keep-alive connections
  // hold one too: size the pool well above the slots.
  const size_t threads = static_cast<size_t>(std::max(32, 4 * ctx_.options.parallel + 16));
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(ctx_.options.body_limit);
  server_->set_keep_alive_max_count(1000);
  add_routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const ServerOptions& o = ctx_.options;
  int port = o.port;
  if (port == 0) {
    port = server_->bind_to_any_port(o.host);
    if (port < 0) fail("cannot listen on {}: no free port", o.host);
  } else if (!server_->bind_to_port(o.host, port)) {
    fail("cannot listen on {}:{} (in use, or not an address of this machine)", o.host, port);
  }
  return port;
}

void HttpServer::start() {
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

void HttpServer::attach(Engine& engine, Scheduler& scheduler) {
  ctx_.engine.store(&engine);
  ctx_.scheduler.store(&scheduler);
  ctx_.metrics.start_rate_sampling(scheduler);
}

void HttpServer::stop() {
  if (Scheduler* s = ctx_.scheduler.load()) ctx_.in_flight.cancel_all(*s);
  server_->stop();
  if (thread_.joinable()) thread_.join();
  ctx_.metrics.stop_rate_sampling();
}

void HttpServer::add_routes() {
  httplib::Server& svr = *server_;
  ServingContext& ctx = ctx_;

  // Wraps a /v1 route: the API key, loading state and errors in OpenAI's shape.
  auto api = [&ctx](Handler handler, bool needs_model) -> Handler {
    return [&ctx, handler, needs_model](const httplib::Request& req, httplib::Response& res) {
      try {
        if (ctx.options.api_key) {
          const std::string auth = req.get_header_value("Authorization");
          if (auth.empty())
            throw ApiError(401, "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'.",
                           "invalid_request_error", "", "invalid_api_key");
          const std::string& key = *ctx.options.api_key;
          const std::string given = auth.starts_with("Bearer ") ? auth.substr(7) : std::string();
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
        send_error(res, e);
      } catch (const Error& e) {
        send_error(res, ApiError(400, e.what()));
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(res, ApiError(500, e.what(), "server_error"));
      }
    };
  };
  auto both = [&svr](const char* method, const std::string& path, const Handler& h) {
    for (const std::string& p : {path, path.substr(3)}) {  // "/v1/x" and "/x"
      if (std::string_view(method) == "GET") svr.Get(p, h);
      else svr.Post(p, h);
    }
  };

  both("POST", "/v1/chat/completions",
       api([&ctx](const auto& req, auto& res) { handle_generation(ctx, req, res, true); }, true));
  both("POST", "/v1/completions",
       api([&ctx](const auto& req, auto& res) { handle_generation(ctx, req, res, false); }, true));

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
         ctx.check_model(req.matches[1].str());
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
  svr.Get("/v1/cluster", api([&ctx, view](const auto&, auto& res) {
            SchedulerStats stats;
            send_json(res, 200, ctx.metrics.cluster(view(stats)));
          }, false));
  svr.Get("/metrics", [&ctx, view](const httplib::Request&, httplib::Response& res) {
    SchedulerStats stats;
    res.set_content(ctx.metrics.prometheus(view(stats)), "text/plain; version=0.0.4; charset=utf-8");
  });

  svr.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    const ServerStatus s = ctx.state.status();
    json body = {{"status", phase_name(s.phase)}};
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
  svr.Get("/", asset);
  svr.Get("/cluster", asset);
  svr.Get(R"(/static/.+)", asset);

  // What httplib answers by itself (no route, body over the limit, a broken
  // request line) gets a body in OpenAI's error shape too.
  svr.set_error_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    std::string code;
    switch (res.status) {
      case 404: message = fmt::format("Invalid URL ({} {})", req.method, req.path); code = "not_found"; break;
      case 413:
        message = fmt::format("The request body is too large: the limit is {} bytes.", ctx.options.body_limit);
        code = "request_too_large";
        break;
      case 400: message = "Malformed HTTP request."; break;
      default: message = fmt::format("HTTP status {}", res.status); break;
    }
    send_json(res, res.status, error_body(res.status, message, res.status >= 500 ? "server_error"
                                                                                 : "invalid_request_error",
                                          "", code));
  });
  svr.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
    ctx.metrics.count_http(res.status);
    spdlog::debug("{} {} -> {}", req.method, req.path, res.status);
  });
}

}  // namespace shoal::server
