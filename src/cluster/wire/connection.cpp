#include "cluster/wire/connection.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace shoal::wire {

Connection::Connection(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // one message per step: no Nagle delay
}

Connection::~Connection() { ::close(fd_); }

std::pair<std::string, int> split_address(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    fail("bad address '{}': expected host:port", address);
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (...) {
    fail("bad port in address '{}'", address);
  }
  if (port <= 0 || port > 65535) fail("bad port in address '{}'", address);
  return {host, port};
}

std::unique_ptr<Connection> Connection::connect(const std::string& address, int timeout_ms) {
  auto [host, port] = split_address(address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) fail("cannot resolve {}: {}", address, gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, timeout_ms);
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        last_error = rc == 0 ? "timed out" : std::strerror(err ? err : errno);
        rc = -1;
      }
    } else if (rc != 0) {
      last_error = std::strerror(errno);
    }
    if (rc == 0) {
      int flags = 0;
      ::ioctl(fd, FIONBIO, &flags);  // back to blocking: reads wait in poll/recv, never spin
      ::freeaddrinfo(res);
      return std::make_unique<Connection>(fd, address);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  fail("cannot connect to {}: {}", address, last_error);
}

void Connection::send(MessageType type, uint64_t request_id, std::span<const std::span<const uint8_t>> parts) {
  std::lock_guard<std::mutex> lock(write_mutex_);
  send_frame(type, request_id, parts);
}

void Connection::send_frame(MessageType type, uint64_t request_id, std::span<const std::span<const uint8_t>> parts) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.request_id = request_id;
  for (const auto& p : parts) h.payload_bytes += p.size();
  if (cipher_) h.payload_bytes += kTagBytes;
  uint8_t header[kHeaderBytes];
  encode_header(h, header);
  iovec iov[16];
  if (parts.size() + 1 > 16) fail("internal: too many frame parts");
  iov[0] = {header, kHeaderBytes};
  size_t n_iov = 1;
  if (cipher_) {
    cipher_->seal(header, parts, sealed_);
    iov[n_iov++] = {sealed_.data(), sealed_.size()};
  } else {
    for (const auto& p : parts)
      if (!p.empty()) iov[n_iov++] = {const_cast<uint8_t*>(p.data()), p.size()};
  }
  size_t first = 0;
  while (first < n_iov) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = n_iov - first;
    ssize_t sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      // Part of a frame may be out (and a sealed frame's number is used):
      // nothing more can be sent after it, so the link is finished.
      ::shutdown(fd_, SHUT_RDWR);
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        throw LinkError(LinkError::Kind::Timeout, peer_,
                        fmt::format("{} stopped reading: sending {} made no progress within the timeout", peer_,
                                    message_name(type)), this);
      throw LinkError(LinkError::Kind::Failed, peer_,
                      fmt::format("connection to {} lost while sending {}: {}", peer_, message_name(type),
                                  std::strerror(errno)), this);
    }
    // Advance over what was written (partial writes happen with big frames).
    size_t left = static_cast<size_t>(sent);
    while (first < n_iov && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < n_iov) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  last_sent_ = now_ticks();
}

void Connection::encrypt(const uint8_t send_key[kKeyBytes], const uint8_t recv_key[kKeyBytes]) {
  std::lock_guard<std::mutex> lock(write_mutex_);
  cipher_ = std::make_unique<FrameCipher>(send_key, recv_key);
}

void Connection::set_timeout(int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1, idle = std::max(1, timeout_ms / 1000), interval = 1, count = 3;
  ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  // Unacknowledged data on a cut link fails within the timeout too.
  unsigned user_timeout = static_cast<unsigned>(timeout_ms);
  ::setsockopt(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

bool Connection::heartbeat_if_idle(std::chrono::milliseconds idle) noexcept {
  std::unique_lock<std::mutex> lock(write_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || Clock::now() - last_sent() < idle) return false;
  try {
    send_frame(MessageType::Heartbeat, 0, {});
    return true;
  } catch (...) {
    return false;  // the reader notices the dead link
  }
}

void Connection::drain() {
  Frame frame;
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
    receive_one(frame, 1000);  // a frame's rest follows its first bytes at once
  }
}

void Connection::send_json(MessageType type, uint64_t request_id, const nlohmann::json& body) {
  std::string text = body.dump();
  std::span<const uint8_t> part(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  send(type, request_id, std::span(&part, 1));
}

void Connection::send_error(ErrorCode code, const std::string& message, uint64_t request_id) noexcept {
  try {
    send_json(MessageType::Error, request_id, {{"code", static_cast<int>(code)}, {"message", message}});
  } catch (...) {
  }
}

void Connection::read_exact(uint8_t* dst, size_t n, Clock::time_point& deadline, int progress_ms, int silent_ms,
                            Pace* pace) {
  const bool bounded = deadline != Clock::time_point::max();
  while (n > 0) {
    if (pace && Clock::now() > pace->limit())
      throw LinkError(LinkError::Kind::Timeout, peer_,
                      fmt::format("{} sends a frame slower than {} KB/s: not a working link (timeout)", peer_,
                                  kSlowestLinkBytesPerMs),
                      this);
    if (bounded) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      int rc = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
      if (rc == 0)
        throw LinkError(LinkError::Kind::Timeout, peer_,
                        fmt::format("{} was silent for {:.1f} s (timeout)", peer_, silent_ms / 1000.0), this);
      if (rc < 0 && errno != EINTR)
        throw LinkError(LinkError::Kind::Failed, peer_, fmt::format("connection to {} failed: {}", peer_, std::strerror(errno)), this);
      if (rc < 0) continue;
    }
    ssize_t got = ::recv(fd_, dst, n, 0);
    if (got == 0) throw LinkError(LinkError::Kind::Closed, peer_, fmt::format("connection closed by {}", peer_), this);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw LinkError(errno == ETIMEDOUT ? LinkError::Kind::Timeout : LinkError::Kind::Failed, peer_,
                      fmt::format("connection to {} lost: {}", peer_, std::strerror(errno)), this);
    }
    last_received_ = now_ticks();
    if (pace) pace->received += static_cast<uint64_t>(got);
    if (progress_ms > 0) {
      deadline = Clock::now() + std::chrono::milliseconds(progress_ms);
      if (pace) deadline = std::min(deadline, pace->limit());
    }
    dst += got;
    n -= static_cast<size_t>(got);
  }
}

void Connection::receive(Frame& frame, int timeout_ms) {
  while (!receive_one(frame, timeout_ms)) {
  }
}

bool Connection::receive_one(Frame& frame, int timeout_ms) {
  const auto header_deadline =
      timeout_ms < 0 ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(timeout_ms);
  // A small payload follows its header at once; a big one may take a while
  // on a slow link: allowed while bytes keep coming. The payload's clock
  // starts once the header is in (read_frame computes it).
  return read_frame(frame, header_deadline, timeout_ms, Clock::time_point::min(),
                    timeout_ms < 0 ? kDefaultPeerTimeoutMs * 12 : std::max(timeout_ms, 1000));
}

void Connection::receive_by(Frame& frame, Clock::time_point deadline) {
  const int budget_ms = static_cast<int>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  if (!read_frame(frame, deadline, budget_ms, deadline, 0))
    throw ProtocolError(ErrorCode::Malformed,
                        fmt::format("{} sent HEARTBEAT before the handshake finished: refused", peer_));
}

bool Connection::read_frame(Frame& frame, Clock::time_point header_deadline, int header_silent_ms,
                            Clock::time_point payload_deadline, int payload_progress_ms) {
  uint8_t header[kHeaderBytes];
  read_exact(header, kHeaderBytes, header_deadline, 0, header_silent_ms);  // (a copy: never moved)
  const FrameHeader h = decode_header(header);
  frame.header = h;
  if (h.magic != kMagic) {
    std::string msg = fmt::format("{} is not a Shoal peer (bad frame magic 0x{:08x})", peer_, h.magic);
    send_error(ErrorCode::Malformed, "bad frame magic: not the Shoal protocol");
    throw ProtocolError(ErrorCode::Malformed, msg);
  }
  if (h.version != kProtocolVersion) {
    std::string msg = fmt::format("protocol version mismatch: this side speaks v{}, {} speaks v{}", kProtocolVersion,
                                  peer_, h.version);
    send_error(ErrorCode::VersionMismatch,
               fmt::format("protocol version mismatch: peer speaks v{}, you speak v{}", kProtocolVersion, h.version));
    throw ProtocolError(ErrorCode::VersionMismatch, msg);
  }
  const uint64_t overhead = cipher_ ? kTagBytes : 0;
  if (h.payload_bytes > max_payload_ + overhead) {
    std::string msg = fmt::format("{} sent a {} frame of {} bytes, over the limit of {}", peer_,
                                  message_name(frame.type()), h.payload_bytes, max_payload_);
    send_error(ErrorCode::FrameTooLarge, fmt::format("frame of {} bytes exceeds the limit of {} bytes",
                                                     h.payload_bytes, max_payload_));
    throw ProtocolError(ErrorCode::FrameTooLarge, msg);
  }
  int progress_ms = 0, silent_ms = header_silent_ms;
  Pace pace;
  Pace* paced = nullptr;
  if (payload_deadline == Clock::time_point::min()) {
    // receive_one: the payload gets its own wait, moved on while bytes of a big one come.
    silent_ms = payload_progress_ms;
    payload_deadline = Clock::now() + std::chrono::milliseconds(payload_progress_ms);
    if (h.payload_bytes > (64u << 10)) {
      progress_ms = payload_progress_ms;
      pace = {Clock::now(), payload_progress_ms, 0};
      paced = &pace;
    }
  }
  // The buffer grows as bytes arrive, not as the header declares: a peer
  // that declares 255 MiB and sends a byte every second holds a few KiB.
  size_t have = 0;
  const size_t want = h.payload_bytes;
  while (true) {
    const size_t room = std::min(want, std::max<size_t>(have * 2, kFirstPayloadChunk));
    frame.payload.resize(room);
    read_exact(frame.payload.data() + have, room - have, payload_deadline, progress_ms, silent_ms, paced);
    have = room;
    if (have == want) break;
  }
  if (cipher_ && !cipher_->open(header, frame.payload)) {
    const std::string msg = fmt::format(
        "integrity check failed on a {} frame from {}: it was altered, replayed, dropped or injected on the way; the "
        "connection is closed",
        message_name(frame.type()), peer_);
    send_error(ErrorCode::Integrity, "integrity check failed on a frame you sent (altered, replayed, dropped or "
                                     "injected on the way); the connection is closed");
    throw ProtocolError(ErrorCode::Integrity, msg);
  }
  if (frame.type() == MessageType::Heartbeat && frame.payload.empty()) return false;
  return true;
}

void Connection::expect(Frame& frame, MessageType expected, int timeout_ms) {
  receive(frame, timeout_ms);
  check(frame, expected);
}

void Connection::expect_reply(Frame& frame, MessageType expected, uint64_t request_id, int timeout_ms) {
  do {
    receive(frame, timeout_ms);
  } while (frame.header.request_id != 0 && frame.header.request_id < request_id);
  check(frame, expected);
}

void Connection::check(const Frame& frame, MessageType expected) const {
  if (frame.type() == MessageType::Error) {
    auto body = parse_json(frame);
    throw ProtocolError(static_cast<ErrorCode>(body.value("code", 0)),
                        fmt::format("{}: {}", peer_, body.value("message", std::string("error"))));
  }
  if (frame.type() != expected)
    throw ProtocolError(ErrorCode::Malformed, fmt::format("{} sent {} where {} was expected", peer_,
                                                          message_name(frame.type()), message_name(expected)));
}

nlohmann::json Connection::expect_json(MessageType expected, int timeout_ms) {
  Frame frame;
  expect(frame, expected, timeout_ms);
  return parse_json(frame);
}

void Connection::shutdown() noexcept { ::shutdown(fd_, SHUT_RDWR); }

void Connection::linger(std::chrono::milliseconds most) noexcept {
  // Closing with unread input makes the kernel send RST, and a peer's
  // kernel then drops the ERROR frame it has not read yet: its end of the
  // stream comes first, and what it still sends is read and dropped.
  ::shutdown(fd_, SHUT_WR);
  const auto until = Clock::now() + most;
  uint8_t scratch[16384];
  size_t dropped = 0;
  while (dropped < (1u << 20)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return;
    const ssize_t got = ::recv(fd_, scratch, sizeof scratch, MSG_DONTWAIT);
    if (got == 0) return;
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return;
    }
    dropped += static_cast<size_t>(got);
  }
}

nlohmann::json parse_json(const Frame& frame) {
  auto body = nlohmann::json::parse(frame.payload.begin(), frame.payload.end(), nullptr, false);
  if (body.is_discarded() || !body.is_object())
    throw ProtocolError(ErrorCode::Malformed, fmt::format("{} payload is not a JSON object", message_name(frame.type())));
  return body;
}

}  // namespace shoal::wire
