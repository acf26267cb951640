#pragma once
// One TCP connection speaking the frame protocol: gathered writes with
// TCP_NODELAY, bounded reads that refuse an oversized frame before
// allocating, and timeouts so nothing waits forever on a silent peer.
#include <nlohmann/json.hpp>

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cluster/protocol.h"

namespace shoal::wire {

struct Frame {
  FrameHeader header;
  std::vector<uint8_t> payload;  // capacity is reused between receives
  MessageType type() const { return static_cast<MessageType>(header.type); }
};

class Connection {
 public:
  Connection(int fd, std::string peer);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects to "host:port"; throws shoal::Error naming the address.
  static std::unique_ptr<Connection> connect(const std::string& address, int timeout_ms = 5000);

  // One frame from payload parts, written with one sendmsg (no copies).
  void send(MessageType type, uint64_t request_id, std::span<const std::span<const uint8_t>> parts);
  void send_json(MessageType type, uint64_t request_id, const nlohmann::json& body);
  // Best effort: an ERROR frame; never throws.
  void send_error(ErrorCode code, const std::string& message, uint64_t request_id = 0) noexcept;

  // Reads one frame into `frame`. timeout_ms < 0 waits as long as it takes
  // (blocking, not spinning). A frame with a bad magic, another protocol
  // version or an oversized payload is answered with ERROR and throws
  // ProtocolError; end of stream or a timeout throws shoal::Error.
  void receive(Frame& frame, int timeout_ms = -1);
  // receive(), then: an ERROR frame throws ProtocolError with the peer's
  // message; any type but `expected` throws ProtocolError (Malformed).
  void expect(Frame& frame, MessageType expected, int timeout_ms = -1);
  nlohmann::json expect_json(MessageType expected, int timeout_ms = -1);

  void set_max_payload(uint64_t bytes) { max_payload_ = bytes; }
  const std::string& peer() const { return peer_; }
  int fd() const { return fd_; }
  // Wakes a reader blocked in another thread (it sees end of stream).
  void shutdown() noexcept;

 private:
  void read_exact(uint8_t* dst, size_t n, int timeout_ms);

  int fd_;
  std::string peer_;
  uint64_t max_payload_ = kDefaultMaxPayload;
  std::mutex write_mutex_;  // frames from several threads never interleave
};

// Parses a JSON payload; throws ProtocolError (Malformed) on bad JSON.
nlohmann::json parse_json(const Frame& frame);
// "host:port" → (host, port); throws shoal::Error on bad syntax.
std::pair<std::string, int> split_address(const std::string& address);

}  // namespace shoal::wire
