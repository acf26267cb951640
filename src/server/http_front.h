#pragma once
// The acceptor in front of the HTTP routes. Debian's cpp-httplib (0.11)
// gives each connection a pool thread while it reads the request, restarts
// its read timeout on every byte, caps neither header count nor a chunked
// body, and cannot tell a handler that its client left: a few slow or
// hostile clients starve everyone (measured in issue 12). So connections are
// accepted and read here, by one poll() loop that costs no thread per
// client, under limits; only a complete, well-formed request goes to a
// handler thread, which runs the route and writes the response (chunked for
// streams). httplib's Request and Response stay as the routes' data types.
//
// Limits: connections in all and per client address; one deadline for the
// whole request head and one for the body (not per byte); head size and
// header count; the body limit applied while a chunked body arrives, before
// any route (and the API key) sees it; a write that makes no progress ends
// the connection. Over a limit the client gets 408, 413, 429, 431 or 503 and
// the connection is closed.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_request_reader.h"

namespace shoal::server {

struct HttpLimits {
  size_t max_head_bytes = 64 << 10;  // request line + headers
  size_t max_headers = 100;
  uint64_t max_body_bytes = 1 << 20;
  int head_timeout_ms = 10000;       // the whole head, from its first byte
  int body_timeout_ms = 30000;       // the whole body, from the end of the head
  int idle_timeout_ms = 5000;        // a kept-alive connection waiting for its next request
  int write_timeout_ms = 30000;      // a response write with no progress
  int max_connections = 1024;
  int max_per_address = 256;
  int max_requests_per_connection = 1000;
  int handler_threads = 32;
  int quick_threads = 2;             // for the quick routes alone (set_quick)
  size_t max_queued = 1024;          // complete requests waiting for a handler
};

class HttpFront {
 public:
  // Runs one complete request on a handler thread and fills the response
  // (a body, or a chunked content provider for a stream).
  using Route = std::function<void(httplib::Request& req, httplib::Response& res)>;
  // The JSON body for a request the front refuses itself (408, 413, ...).
  // The body of a refusal the front makes itself; path is the request's
  // when its head was read (empty otherwise), so a route's API can give
  // its own error shape.
  using Refusal = std::function<std::string(int status, const std::string& message, const std::string& path)>;
  // After each response (for metrics and logs).
  using Logger = std::function<void(const httplib::Request& req, int status)>;

  HttpFront(HttpLimits limits, Route route, Refusal refusal, Logger logger);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Requests this says yes to (health, metrics, cluster status: answered
  // from memory, never waiting on generation) go to their own handler
  // threads, so they never queue behind streams that hold every other
  // handler. Set before start().
  void set_quick(std::function<bool(const httplib::Request&)> quick) { quick_ = std::move(quick); }

  // Binds (port 0: any free one) and returns the port; throws shoal::Error.
  int bind(const std::string& host, int port);
  void start();
  // Stops accepting, closes every connection and joins the threads.
  void stop();

  // On a handler thread: has the client of the request being handled
  // closed its connection? For a handler that waits on something else.
  static bool client_gone();
  // Connections open now (reading, queued or being handled).
  int open_connections() const { return open_.load(); }

 private:
  struct Conn;
  void accept_loop();
  // Reads what arrived; false when the connection is done with (closed,
  // refused, or handed to a handler).
  bool on_readable(Conn& c);
  // Feeds bytes to the connection's reader and acts on its state; false as above.
  bool advance(std::unique_ptr<Conn>& c, std::string_view bytes);
  // Answers with an error and closes gracefully: our side is shut, and what
  // the client still sends is read and dropped for a moment (without that,
  // closing on unread bytes sends a reset, and the client may never see the
  // answer). Takes the connection.
  void refuse(std::unique_ptr<Conn>& c, int status, const std::string& message);
  void release(Conn& c);  // closes the socket, frees the counts
  void handler_loop(bool quick);
  void serve(Conn& c);
  void wake();

  HttpLimits limits_;
  Route route_;
  Refusal refusal_;
  Logger logger_;
  std::function<bool(const httplib::Request&)> quick_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: connections handed back, or stop
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_{0};
  std::thread acceptor_;
  std::vector<std::thread> handlers_;

  // Acceptor thread only.
  std::map<int, std::unique_ptr<Conn>> reading_;
  std::map<int, std::unique_ptr<Conn>> draining_;  // refused, answered, read until closed

  mutable std::mutex mutex_;
  std::map<std::string, int> per_address_;
  std::condition_variable ready_cv_;
  std::deque<std::unique_ptr<Conn>> ready_;     // complete requests for the handlers
  std::condition_variable quick_cv_;
  std::deque<std::unique_ptr<Conn>> quick_ready_;  // complete quick requests, for their own handlers
  std::vector<std::unique_ptr<Conn>> returned_;  // kept-alive connections back to the acceptor
};

}  // namespace shoal::server
