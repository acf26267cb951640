#pragma once
// The HTTP side of `shoal serve` (cpp-httplib): routes, API-key check, body
// limit, OpenAI-shaped errors, and the static web UI. It listens before the
// model loads, so /health and /v1/cluster can report loading progress; the
// model is attached when ready.
//
//   POST /v1/chat/completions, /v1/completions   generation (SSE with "stream")
//   GET  /v1/models, /v1/models/{id}              the served model
//   GET  /v1/cluster                              devices, layers, memory, RTT, throughput
//   GET  /health                                  200 ready; 503 loading / degraded
//   GET  /metrics                                 Prometheus text
//   GET  /, /cluster, /static/...                 the web UI
// The /v1 routes also answer without the prefix. With an API key, /v1/*
// needs "Authorization: Bearer KEY"; /health, /metrics and the UI's pages
// stay open (the pages carry no data; the UI sends the key it is given).
#include <memory>
#include <thread>

#include "server/serving_context.h"

namespace httplib {
class Server;
}

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

  const std::string& model_id() const { return ctx_.model_id; }

 private:
  void add_routes();

  ServingContext ctx_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace shoal::server
