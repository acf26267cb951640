#pragma once
// The HTTP side of `shoal serve`: routes, API-key check, OpenAI-shaped
// errors, and the static web UI, behind HttpFront (http_front.h), which
// accepts and reads requests under limits. It listens before the
// model loads, so /health and /v1/cluster can report loading progress; the
// model is attached when ready.
//
//   POST /v1/chat/completions, /v1/completions   generation (SSE with "stream")
//   GET  /v1/models, /v1/models/{id}              the served model
//   GET  /v1/cluster                              devices, layers, memory, RTT, throughput
//   GET  /health                                  200 {"status": "ok"}; 503 loading / degraded
//   GET  /metrics                                 Prometheus text
//   GET  /, /cluster, /static/...                 the web UI
// The /v1 routes also answer without the prefix. With an API key, /v1/*
// needs "Authorization: Bearer KEY"; /health, /metrics and the UI's pages
// stay open (the pages carry no data; the UI sends the key it is given).
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "server/http_front.h"
#include "server/serving_context.h"

namespace shoal::server {

class HttpServer {
 public:
  HttpServer(ServerOptions options, ServerState& state);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket (port 0: any free one) and returns the port.
  // Throws shoal::Error if the address cannot be bound.
  int bind();
  // Serves on a thread of its own until stop().
  void start();
  // The model is loaded: API calls reach it from now on.
  void attach(Engine& engine, Scheduler& scheduler);
  // Cancels every request in flight, stops listening and joins the HTTP
  // threads. Must run before the Scheduler and Engine are destroyed.
  void stop();
  // Connections open now (for tests of the limits, via /metrics).
  int open_connections() const { return front_->open_connections(); }

  const std::string& model_id() const { return ctx_.model_id; }

 private:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  struct Route {
    std::string method;
    std::regex path;
    Handler handler;
  };
  void add_routes();
  void add(const std::string& method, const std::string& path, Handler handler);
  void dispatch(httplib::Request& req, httplib::Response& res);

  ServingContext ctx_;
  std::vector<Route> routes_;
  std::unique_ptr<HttpFront> front_;
};

}  // namespace shoal::server
