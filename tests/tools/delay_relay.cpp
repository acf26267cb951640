// delay_relay: a TCP relay that adds a fixed one-way delay (and optionally a
// token-bucket rate limit) per direction, for tests and benchmarks on kernels
// without netem. Like toxiproxy's latency toxic, but tiny and event-driven.
//
//   delay_relay --listen HOST:PORT --target HOST:PORT --delay-ms D [--delay-up-ms U]
//               [--delay-down-ms W] [--rate-mbit R] [--max-conns N] [--spin-us S]
// "up" is client -> target, "down" is target -> client. Each chunk read is
// stamped with CLOCK_MONOTONIC and written no earlier than stamp + delay, in
// order; a FIN is delayed the same way (half-close is forwarded). A reset or
// error on either side resets both. --rate-mbit limits each direction
// separately. --max-conns caps concurrent connections (extra ones wait in the
// listen backlog). Port 0 binds an ephemeral port; the real one is printed as
// "listening on HOST:PORT". SIGTERM/SIGINT: close everything, exit 0. Timer
// wake-ups cost tens of µs on some hosts; --spin-us S wakes S µs early and polls
// without sleeping until the chunk is due (exact, but burns CPU; default 0).
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr int64_t kNever = INT64_MAX;
constexpr size_t kReadSize = 64 * 1024;
constexpr size_t kBufferCap = 8 * 1024 * 1024;  // per direction; pause reading above
constexpr uint64_t kListenTag = 0, kTimerTag = 1, kSignalTag = 2;

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "delay_relay: %s\n", msg.c_str());
  std::exit(2);
}

struct Chunk {
  int64_t due;
  std::vector<char> data;  // empty + eof: a FIN to forward
  size_t off = 0;
  bool eof = false;
};

struct Pipe {  // one direction
  int64_t delay = 0;
  std::deque<Chunk> q;
  size_t buffered = 0;
  bool src_eof = false, dst_shut = false, want_out = false;
  double tokens = 0;
  int64_t last_refill = 0;
};

struct Side { int fd = -1; uint32_t mask = 0; bool registered = false; };

struct Conn {
  uint64_t id = 0;
  Side s[2];  // 0 = client, 1 = target
  Pipe up, down;  // up: client -> target, down: target -> client
  bool connected = false, dead = false;
};

struct Config {
  sockaddr_storage listen{}, target{};
  socklen_t listen_len = 0, target_len = 0;
  int64_t delay_up = 0, delay_down = 0;
  double rate_bps = 0;  // bytes per second, 0 = unlimited
  double burst = 0;
  size_t max_conns = 0;
  int64_t spin = 0;  // wake this early and poll without sleeping (opt-in accuracy)
};

Config cfg;
int ep = -1, listen_fd = -1, timer_fd = -1;
bool listening = false;
std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
uint64_t next_id = 16;

void resolve(const std::string& hp, sockaddr_storage* out, socklen_t* len, bool passive) {
  size_t colon = hp.rfind(':');
  if (colon == std::string::npos) die("expected HOST:PORT, got " + hp);
  std::string host = hp.substr(0, colon), port = hp.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res) die("cannot resolve " + hp + ": " + gai_strerror(rc));
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void epoll_set(int fd, uint64_t tag, uint32_t events, bool add) {
  epoll_event ev{events, {.u64 = tag}};
  if (epoll_ctl(ep, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev) != 0) die("epoll_ctl: " + std::string(strerror(errno)));
}

// A side whose mask is 0 is taken out of epoll entirely, so that EPOLLHUP /
// EPOLLERR (always reported) cannot spin the loop while we ignore that fd.
void update_mask(Conn& c, int side, uint32_t mask) {
  Side& s = c.s[side];
  if (s.fd < 0) return;
  if (mask == 0 && s.registered) epoll_ctl(ep, EPOLL_CTL_DEL, s.fd, nullptr);
  else if (mask != 0 && (!s.registered || mask != s.mask)) epoll_set(s.fd, c.id * 2 + side, mask, !s.registered);
  s.registered = mask != 0;
  s.mask = mask;
}

void close_conn(Conn& c, bool reset) {
  if (c.dead) return;
  c.dead = true;
  for (Side& s : c.s) {
    if (s.fd < 0) continue;
    if (reset) {
      linger lg{1, 0};  // close with RST so the peer sees the failure
      setsockopt(s.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(s.fd);  // also drops it from epoll
    s.fd = -1;
  }
}

void refill(Pipe& p, int64_t now) {
  if (cfg.rate_bps <= 0) return;
  p.tokens = std::min(cfg.burst, p.tokens + double(now - p.last_refill) * cfg.rate_bps / 1e9);
  p.last_refill = now;
}

// Write every due chunk of p to dst; returns false if the connection died.
// *next is lowered to the time this pipe next needs service (delay or tokens).
bool flush(Conn& c, Pipe& p, int dst, int64_t now, int64_t* next) {
  p.want_out = false;
  while (!p.q.empty()) {
    Chunk& ch = p.q.front();
    if (ch.due > now) return *next = std::min(*next, ch.due), true;
    if (ch.eof) {
      shutdown(dst, SHUT_WR);
      p.dst_shut = true;
      p.q.pop_front();
      continue;
    }
    size_t n = ch.data.size() - ch.off;
    if (cfg.rate_bps > 0) {
      refill(p, now);
      if (p.tokens < 1.0 || (p.tokens < double(n) && p.tokens < cfg.burst / 2)) {
        double need = std::min(double(n), cfg.burst / 2) - p.tokens;
        *next = std::min(*next, now + int64_t(need * 1e9 / cfg.rate_bps) + 1);
        return true;
      }
      n = std::min(n, size_t(p.tokens));
    }
    ssize_t w = send(dst, ch.data.data() + ch.off, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return p.want_out = true;
      close_conn(c, true);
      return false;
    }
    if (cfg.rate_bps > 0) p.tokens -= double(w);
    ch.off += size_t(w);
    p.buffered -= size_t(w);
    if (ch.off == ch.data.size()) p.q.pop_front();
  }
  return true;
}

void on_readable(Conn& c, int side) {
  Pipe& p = side == 0 ? c.up : c.down;
  int src = c.s[side].fd, dst = c.s[1 - side].fd;
  static char buf[kReadSize];
  for (int i = 0; i < 8 && !p.src_eof && p.buffered < kBufferCap; ++i) {
    ssize_t n = recv(src, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? void() : close_conn(c, true);
    int64_t t = now_ns();
    if (n == 0) {
      p.src_eof = true;
      p.q.push_back(Chunk{t + p.delay, {}, 0, true});
      return;
    }
    size_t sent = 0;
    if (p.delay == 0 && cfg.rate_bps <= 0 && p.q.empty()) {  // fast path: no queueing
      ssize_t w = send(dst, buf, size_t(n), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return close_conn(c, true);
      sent = w > 0 ? size_t(w) : 0;
    }
    if (sent < size_t(n)) {
      p.q.push_back(Chunk{t + p.delay, std::vector<char>(buf + sent, buf + n), 0, false});
      p.buffered += size_t(n) - sent;
    }
  }
}

void on_connect_done(Conn& c) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(c.s[1].fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
    return err == EINPROGRESS ? void() : close_conn(c, true);
  c.connected = true;
}

void accept_all() {
  while (!cfg.max_conns || conns.size() < cfg.max_conns) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or EMFILE and friends: try again on the next event
    }
    set_nodelay(fd);
    int up = socket(cfg.target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (up < 0) { close(fd); continue; }
    set_nodelay(up);
    auto c = std::make_unique<Conn>();
    c->id = next_id++;
    c->s[0].fd = fd, c->s[1].fd = up;
    c->up.delay = cfg.delay_up, c->down.delay = cfg.delay_down;
    c->up.tokens = c->down.tokens = cfg.burst;
    c->up.last_refill = c->down.last_refill = now_ns();
    if (connect(up, reinterpret_cast<sockaddr*>(&cfg.target), cfg.target_len) == 0) c->connected = true;
    else if (errno != EINPROGRESS) { close_conn(*c, true); continue; }
    conns.emplace(c->id, std::move(c));
  }
}

// After events: flush due data, recompute interest, retire finished conns.
void service(Conn& c, int64_t now, int64_t* next) {
  if (c.dead) return;
  if (c.connected) {
    if (!flush(c, c.up, c.s[1].fd, now, next)) return;
    if (!flush(c, c.down, c.s[0].fd, now, next)) return;
    if (c.up.dst_shut && c.down.dst_shut) return close_conn(c, false);
  }
  uint32_t m0 = 0, m1 = 0;
  if (c.connected) {
    if (!c.up.src_eof && c.up.buffered < kBufferCap) m0 |= EPOLLIN;
    if (!c.down.src_eof && c.down.buffered < kBufferCap) m1 |= EPOLLIN;
    if (c.down.want_out) m0 |= EPOLLOUT;
    if (c.up.want_out) m1 |= EPOLLOUT;
  } else {
    m1 = EPOLLOUT;  // connect in progress
  }
  update_mask(c, 0, m0);
  update_mask(c, 1, m1);
}

int64_t armed = kNever;  // what timer_fd is set to; kNever once it has fired

void arm_timer(int64_t when) {
  if (when == armed) return;
  armed = when;
  itimerspec its{};
  if (when != kNever) its.it_value = {when / 1000000000, when % 1000000000};
  timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, nullptr);
}

void usage() {
  die("usage: delay_relay --listen HOST:PORT --target HOST:PORT --delay-ms D [--delay-up-ms U]\n"
      "       [--delay-down-ms W] [--rate-mbit R] [--max-conns N] [--spin-us S]");
}

int64_t ms_to_ns(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (!end || *end || v < 0) die(std::string("bad delay: ") + s);
  return int64_t(v * 1e6 + 0.5);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen_arg, target_arg;
  int64_t delay = 0, up = -1, down = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (a == "--listen") listen_arg = v;
    else if (a == "--target") target_arg = v;
    else if (a == "--delay-ms") delay = ms_to_ns(v);
    else if (a == "--delay-up-ms") up = ms_to_ns(v);
    else if (a == "--delay-down-ms") down = ms_to_ns(v);
    else if (a == "--rate-mbit") cfg.rate_bps = std::strtod(v, nullptr) * 1e6 / 8;
    else if (a == "--max-conns") cfg.max_conns = std::strtoul(v, nullptr, 10);
    else if (a == "--spin-us") cfg.spin = ms_to_ns(v) / 1000;
    else usage();
  }
  if (listen_arg.empty() || target_arg.empty()) usage();
  cfg.delay_up = up >= 0 ? up : delay;
  cfg.delay_down = down >= 0 ? down : delay;
  if (cfg.rate_bps > 0) cfg.burst = std::max(16384.0, cfg.rate_bps * 0.002);
  resolve(listen_arg, &cfg.listen, &cfg.listen_len, true);
  resolve(target_arg, &cfg.target, &cfg.target_len, false);

  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // honour sub-millisecond delays
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigprocmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  int sig_fd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
  timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (sig_fd < 0 || timer_fd < 0 || ep < 0) die("setup: " + std::string(strerror(errno)));

  listen_fd = socket(cfg.listen.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (listen_fd < 0 || bind(listen_fd, reinterpret_cast<sockaddr*>(&cfg.listen), cfg.listen_len) != 0 ||
      listen(listen_fd, 1024) != 0)
    die("cannot listen on " + listen_arg + ": " + strerror(errno));
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
  getnameinfo(reinterpret_cast<sockaddr*>(&bound), blen, host, sizeof host, port, sizeof port,
              NI_NUMERICHOST | NI_NUMERICSERV);

  epoll_set(listen_fd, kListenTag, EPOLLIN, true), listening = true;
  epoll_set(timer_fd, kTimerTag, EPOLLIN, true);
  epoll_set(sig_fd, kSignalTag, EPOLLIN, true);
  std::printf(bound.ss_family == AF_INET6 ? "listening on [%s]:%s\n" : "listening on %s:%s\n", host, port);
  std::fflush(stdout);

  std::vector<epoll_event> evs(256);
  int timeout = -1;
  for (;;) {
    int n = epoll_wait(ep, evs.data(), int(evs.size()), timeout);
    if (n < 0 && errno != EINTR) die("epoll_wait: " + std::string(strerror(errno)));
    for (int i = 0; i < n; ++i) {
      uint64_t tag = evs[i].data.u64;
      uint32_t e = evs[i].events;
      if (tag == kListenTag) {
        accept_all();
      } else if (tag == kTimerTag) {
        uint64_t ticks;
        while (read(timer_fd, &ticks, sizeof ticks) > 0) armed = kNever;
      } else if (tag == kSignalTag) {
        for (auto& [id, c] : conns) close_conn(*c, false);
        close(listen_fd);
        return 0;
      } else {
        auto it = conns.find(tag / 2);
        if (it == conns.end() || it->second->dead) continue;
        Conn& c = *it->second;
        int side = int(tag % 2);
        if (!c.connected) {
          if (side == 1) on_connect_done(c);
          continue;
        }
        if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c, side);
        // EPOLLOUT needs nothing here: service() flushes every pipe below.
      }
    }
    int64_t now = now_ns(), next = kNever;
    for (auto it = conns.begin(); it != conns.end();) {
      service(*it->second, now, &next);
      it = it->second->dead ? conns.erase(it) : std::next(it);
    }
    if (!listening && (!cfg.max_conns || conns.size() < cfg.max_conns)) {
      epoll_set(listen_fd, kListenTag, EPOLLIN, true);
      listening = true;  // level-triggered: pending accepts show up next round
    } else if (listening && cfg.max_conns && conns.size() >= cfg.max_conns) {
      epoll_ctl(ep, EPOLL_CTL_DEL, listen_fd, nullptr);
      listening = false;
    }
    timeout = next != kNever && next - now_ns() <= cfg.spin ? 0 : -1;
    arm_timer(next == kNever ? kNever : next - cfg.spin);
  }
}
