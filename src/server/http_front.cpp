#include "server/http_front.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "util/error.h"
#include "util/log.h"

namespace shoal::server {
namespace {

using Clock = std::chrono::steady_clock;

thread_local int t_client_fd = -1;  // the connection a handler thread is answering

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

std::string peer_address(int fd, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "0";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV);
  port = std::atoi(serv);
  return host;
}

// Has the peer closed (or reset) its side? Pipelined bytes waiting to be
// read do not count.
bool peer_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// Everything, or false: a client that stops reading for timeout_ms, or left.
bool write_all(int fd, std::string_view data, int timeout_ms) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, timeout_ms) <= 0 || (p.revents & (POLLHUP | POLLERR))) return false;
      continue;
    }
    return false;
  }
  return true;
}

std::string head_of(const httplib::Response& res, bool chunked, bool close) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", res.status, reason_phrase(res.status));
  for (const auto& [k, v] : res.headers) {
    if (k == "Content-Length" || k == "Transfer-Encoding" || k == "Connection") continue;
    out += k + ": " + v + "\r\n";
  }
  out += chunked ? "Transfer-Encoding: chunked\r\n" : fmt::format("Content-Length: {}\r\n", res.body.size());
  out += close ? "Connection: close\r\n\r\n" : "Connection: keep-alive\r\n\r\n";
  return out;
}

}  // namespace

struct HttpFront::Conn {
  int fd = -1;
  std::string address;
  int port = 0;
  RequestReader reader;
  Clock::time_point deadline;
  bool idle = false;  // kept alive, no byte of the next request yet
  int served = 0;
  uint64_t drained = 0;  // bytes read and dropped after a refusal

  Conn(int f, RequestLimits limits) : fd(f), reader(limits) {}
};

HttpFront::HttpFront(HttpLimits limits, Route route, Refusal refusal, Logger logger)
    : limits_(limits), route_(std::move(route)), refusal_(std::move(refusal)), logger_(std::move(logger)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) fail("eventfd: {}", std::strerror(errno));
}

HttpFront::~HttpFront() {
  stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_fd_);
}

int HttpFront::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    fail("cannot listen on {}: {}", host, gai_strerror(rc));
  listen_fd_ = ::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, res->ai_protocol);
  int one = 1;
  if (listen_fd_ >= 0) ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (listen_fd_ < 0 || ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) != 0 || ::listen(listen_fd_, 512) != 0) {
    const int e = errno;
    ::freeaddrinfo(res);
    fail("cannot listen on {}:{} ({})", host, port, std::strerror(e));
  }
  ::freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void HttpFront::start() {
  acceptor_ = std::thread([this] { accept_loop(); });
  for (int i = 0; i < limits_.handler_threads; ++i) handlers_.emplace_back([this] { handler_loop(false); });
  if (quick_)
    for (int i = 0; i < limits_.quick_threads; ++i) handlers_.emplace_back([this] { handler_loop(true); });
}

void HttpFront::stop() {
  {
    // Under the lock, so a handler about to wait cannot miss the notify.
    std::lock_guard lock(mutex_);
    if (stopping_.exchange(true)) return;
  }
  wake();
  ready_cv_.notify_all();
  quick_cv_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& t : handlers_)
    if (t.joinable()) t.join();
  handlers_.clear();
  for (auto& c : ready_) release(*c);
  for (auto& c : quick_ready_) release(*c);
  for (auto& c : returned_) release(*c);
  ready_.clear();
  quick_ready_.clear();
  returned_.clear();
}

void HttpFront::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

bool HttpFront::client_gone() { return t_client_fd >= 0 && peer_gone(t_client_fd); }

void HttpFront::release(Conn& c) {
  if (c.fd < 0) return;
  ::close(c.fd);
  c.fd = -1;
  --open_;
  std::lock_guard lock(mutex_);
  if (auto it = per_address_.find(c.address); it != per_address_.end() && --it->second <= 0) per_address_.erase(it);
}

void HttpFront::refuse(std::unique_ptr<Conn>& c, int status, const std::string& message) {
  httplib::Response res;
  res.status = status;
  res.body = refusal_(status, message, c->reader.request().path);
  res.set_header("Content-Type", "application/json");
  // Best effort and never blocking: the client may be the one misbehaving.
  const std::string out = head_of(res, false, true) + res.body;
  [[maybe_unused]] ssize_t n = ::send(c->fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (logger_) {
    httplib::Request req;
    logger_(req, status);
  }
  if (draining_.size() >= 256) {
    release(*c);
    c.reset();
    return;
  }
  ::shutdown(c->fd, SHUT_WR);
  c->deadline = Clock::now() + std::chrono::seconds(2);
  const int fd = c->fd;
  draining_[fd] = std::move(c);
}

void HttpFront::accept_loop() {
  std::vector<pollfd> fds;
  auto resume_accept = Clock::now();
  char buf[16384];
  while (!stopping_) {
    // Connections whose response is out, back for their next request.
    std::vector<std::unique_ptr<Conn>> back;
    {
      std::lock_guard lock(mutex_);
      back.swap(returned_);
    }
    for (auto& c : back) {
      const int fd = c->fd;
      std::string leftover = c->reader.take_leftover();
      c->reader = RequestReader({limits_.max_head_bytes, limits_.max_headers, limits_.max_body_bytes});
      c->idle = leftover.empty();
      c->deadline = Clock::now() + std::chrono::milliseconds(c->idle ? limits_.idle_timeout_ms : limits_.head_timeout_ms);
      if (!leftover.empty() && !advance(c, leftover)) continue;
      reading_[fd] = std::move(c);
    }

    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = Clock::now() >= resume_accept;
    if (accepting) fds.push_back({listen_fd_, POLLIN, 0});
    auto next = Clock::now() + std::chrono::seconds(1);
    for (auto& [fd, c] : reading_) {
      fds.push_back({fd, POLLIN | POLLRDHUP, 0});
      next = std::min(next, c->deadline);
    }
    const size_t first_draining = fds.size();
    for (auto& [fd, c] : draining_) {
      fds.push_back({fd, POLLIN | POLLRDHUP, 0});
      next = std::min(next, c->deadline);
    }
    if (!accepting) next = std::min(next, resume_accept);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait) + 1));
    if (rc < 0 && errno != EINTR) {
      spdlog::error("http: poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (fds[0].revents & POLLIN) {
      uint64_t n;
      [[maybe_unused]] ssize_t r = ::read(wake_fd_, &n, sizeof(n));
    }
    const size_t first_conn = accepting ? 2 : 1;
    if (accepting && (fds[1].revents & POLLIN)) {
      for (int k = 0; k < 64; ++k) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            // Out of descriptors: the backlog waits; no busy loop meanwhile.
            spdlog::warn("http: cannot accept ({}); pausing accepts", std::strerror(errno));
            resume_accept = Clock::now() + std::chrono::milliseconds(200);
          }
          break;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        auto c = std::make_unique<Conn>(fd, RequestLimits{limits_.max_head_bytes, limits_.max_headers,
                                                          limits_.max_body_bytes});
        c->address = peer_address(fd, c->port);
        c->deadline = Clock::now() + std::chrono::milliseconds(limits_.head_timeout_ms);
        ++open_;
        int from_here;
        {
          std::lock_guard lock(mutex_);
          from_here = ++per_address_[c->address];
        }
        if (open_.load() > limits_.max_connections) {
          refuse(c, 503, "The server has too many connections open; try again later.");
        } else if (from_here > limits_.max_per_address) {
          refuse(c, 429, fmt::format("Too many connections from {}; close some and try again.", c->address));
        } else {
          reading_[fd] = std::move(c);
        }
      }
    }
    for (size_t i = first_draining; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto it = draining_.find(fds[i].fd);
      if (it == draining_.end()) continue;
      ssize_t n = 0;
      Conn& c = *it->second;
      for (int turn = 0; turn < 64 && (n = ::recv(fds[i].fd, buf, sizeof(buf), 0)) > 0; ++turn) c.drained += n;
      // Enough for a client to finish sending a body a little over the limit
      // and read the answer; one that keeps sending is cut off.
      const uint64_t drain_cap = std::max<uint64_t>(4 << 20, 4 * limits_.max_body_bytes);
      if (n == 0 || c.drained > drain_cap || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        release(*it->second);
        draining_.erase(it);
      }
    }
    for (size_t i = first_conn; i < first_draining; ++i) {
      if (!fds[i].revents) continue;
      auto it = reading_.find(fds[i].fd);
      if (it == reading_.end()) continue;
      // Read what is there, at most 256 KiB a turn so one fast sender
      // cannot hold the loop.
      bool keep = true;
      for (int turn = 0; turn < 16 && keep; ++turn) {
        const ssize_t n = ::recv(it->second->fd, buf, sizeof(buf), 0);
        if (n > 0) {
          if (it->second->idle) {  // the next request begins: its head has its own deadline
            it->second->idle = false;
            it->second->deadline = Clock::now() + std::chrono::milliseconds(limits_.head_timeout_ms);
          }
          keep = advance(it->second, std::string_view(buf, static_cast<size_t>(n)));
          if (!keep) break;
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0 && errno == EINTR) continue;
        release(*it->second);  // closed or reset by the client
        keep = false;
      }
      if (!keep) reading_.erase(fds[i].fd);
    }
    // Deadlines: one for the whole head and one for the whole body, not per byte.
    const auto now = Clock::now();
    for (auto it = reading_.begin(); it != reading_.end();) {
      Conn& c = *it->second;
      if (now < c.deadline) {
        ++it;
        continue;
      }
      if (c.idle) release(c);  // a kept-alive connection nobody used
      else refuse(it->second, 408, "The request did not arrive in time.");
      it = reading_.erase(it);
    }
    for (auto it = draining_.begin(); it != draining_.end();) {
      if (now < it->second->deadline) {
        ++it;
        continue;
      }
      release(*it->second);
      it = draining_.erase(it);
    }
  }
  for (auto& [fd, c] : reading_) release(*c);
  for (auto& [fd, c] : draining_) release(*c);
  reading_.clear();
  draining_.clear();
}

bool HttpFront::advance(std::unique_ptr<Conn>& c, std::string_view bytes) {
  const RequestReader::State before = c->reader.state();
  const RequestReader::State state = c->reader.feed(bytes);
  if (state == RequestReader::State::Failed) {
    refuse(c, c->reader.error_status(), c->reader.error());
    return false;
  }
  if (before == RequestReader::State::Head && state != RequestReader::State::Head)
    c->deadline = Clock::now() + std::chrono::milliseconds(limits_.body_timeout_ms);
  if (c->reader.wants_continue()) {
    // Never wait on the acceptor thread: a client that does not read gets
    // no "100 Continue" (it sends its body after its own short wait).
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    [[maybe_unused]] ssize_t n = ::send(c->fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  if (state != RequestReader::State::Complete) return true;
  const bool quick = quick_ && quick_(c->reader.request());
  std::unique_lock lock(mutex_);
  auto& queue = quick ? quick_ready_ : ready_;
  if (queue.size() >= limits_.max_queued) {
    lock.unlock();
    refuse(c, 503, "The server is overloaded; try again later.");
    return false;
  }
  queue.push_back(std::move(c));
  lock.unlock();
  (quick ? quick_cv_ : ready_cv_).notify_one();
  return false;
}

void HttpFront::handler_loop(bool quick) {
  auto& queue = quick ? quick_ready_ : ready_;
  auto& cv = quick ? quick_cv_ : ready_cv_;
  for (;;) {
    std::unique_ptr<Conn> c;
    {
      std::unique_lock lock(mutex_);
      cv.wait(lock, [&] { return stopping_ || !queue.empty(); });
      if (stopping_) return;
      c = std::move(queue.front());
      queue.pop_front();
    }
    serve(*c);
    if (c->fd < 0) continue;
    std::lock_guard lock(mutex_);
    returned_.push_back(std::move(c));
    wake();
  }
}

void HttpFront::serve(Conn& c) {
  httplib::Request& req = c.reader.request();
  req.remote_addr = c.address;
  req.remote_port = c.port;
  httplib::Response res;
  t_client_fd = c.fd;
  try {
    route_(req, res);
  } catch (const std::exception& e) {
    // Routes answer their own errors; this is a bug, and the client hears
    // no more of it than that.
    spdlog::error("http: {} {}: {}", req.method, req.path, e.what());
    res = httplib::Response();
    res.status = 500;
    res.set_header("Content-Type", "application/json");
    res.body = refusal_(500, "The server had an internal error.", req.path);
  }
  if (res.status < 0) res.status = 200;
  ++c.served;
  const bool close = c.reader.close_after() || c.served >= limits_.max_requests_per_connection || stopping_;
  const bool chunked = res.content_provider_ && res.is_chunked_content_provider_;
  bool ok = write_all(c.fd, head_of(res, chunked, close) + (chunked ? std::string() : res.body),
                      limits_.write_timeout_ms);
  if (ok && chunked) {
    // The route's provider is called until it says done; each write is one
    // chunk. A client that left (or stopped reading) ends it.
    httplib::DataSink sink;
    bool done = false;
    size_t offset = 0;
    sink.write = [&](const char* d, size_t n) {
      if (!ok || n == 0) return ok;
      ok = write_all(c.fd, fmt::format("{:x}\r\n", n) + std::string(d, n) + "\r\n", limits_.write_timeout_ms);
      offset += n;
      return ok;
    };
    sink.done = [&] { done = true; };
    sink.is_writable = [&] { return ok && !peer_gone(c.fd); };
    try {
      while (ok && !done) {
        if (!res.content_provider_(offset, 0, sink)) ok = false;
      }
    } catch (const std::exception& e) {
      spdlog::error("http: {} {}: stream failed: {}", req.method, req.path, e.what());
      ok = false;
    }
    if (ok) ok = write_all(c.fd, "0\r\n\r\n", limits_.write_timeout_ms);
    res.content_provider_success_ = ok;
  }
  t_client_fd = -1;
  if (logger_) logger_(req, res.status);
  if (!ok || close) release(c);
}

}  // namespace shoal::server
