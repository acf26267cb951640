#pragma once
// One TCP connection speaking the frame protocol: gathered writes with
// TCP_NODELAY, bounded reads that refuse an oversized frame before
// allocating, and timeouts so nothing waits forever on a silent peer.
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cluster/wire/frame_cipher.h"
#include "cluster/wire/protocol.h"

namespace shoal::wire {

struct Frame {
  FrameHeader header;
  std::vector<uint8_t> payload;  // capacity is reused between receives
  MessageType type() const { return static_cast<MessageType>(header.type); }
};

// The link to a peer failed: closed, reset, or silent past its deadline.
// It names the peer, so whoever holds several links knows which one died
// without matching strings.
class LinkError : public Error {
 public:
  enum class Kind { Closed, Timeout, Failed };
  LinkError(Kind kind, std::string peer, const std::string& message, const void* link = nullptr)
      : Error(message), kind_(kind), peer_(std::move(peer)), link_(link) {}
  Kind kind() const { return kind_; }
  const std::string& peer() const { return peer_; }
  // The Connection that failed (an identity only, never dereferenced): a
  // peer reconnected since then is a different link and not at fault.
  const void* link() const { return link_; }

 private:
  Kind kind_;
  std::string peer_;
  const void* link_;
};

class Connection {
 public:
  using Clock = std::chrono::steady_clock;

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

  // Reads one frame into `frame`, waiting at most timeout_ms for it to
  // begin (< 0: as long as it takes, blocking, never spinning). HEARTBEATs
  // are consumed here and restart the wait: a peer that keeps saying "busy"
  // is slow, not lost. A big payload may take longer, as long as bytes keep
  // coming. A frame with a bad magic, another protocol version or an
  // oversized payload is answered with ERROR and throws ProtocolError; end of
  // stream, a reset or a deadline throws LinkError.
  void receive(Frame& frame, int timeout_ms);
  // The handshake's read: one whole frame by `deadline`, an absolute time
  // that nothing moves (a stranger trickling bytes or sending HEARTBEATs
  // cannot hold the connection past it). A HEARTBEAT here is a protocol
  // error: nothing may restart a wait before both sides are authenticated.
  void receive_by(Frame& frame, Clock::time_point deadline);
  // One frame, or one HEARTBEAT (then false, and `frame` is untouched):
  // for a caller that watches several links and must not wait on one.
  bool receive_one(Frame& frame, int timeout_ms);
  // receive(), then: an ERROR frame throws ProtocolError with the peer's
  // message; any type but `expected` throws ProtocolError (Malformed).
  void expect(Frame& frame, MessageType expected, int timeout_ms);
  // expect() for the answer to request `request_id`: answers to earlier
  // requests (abandoned when a step failed elsewhere) are skipped.
  void expect_reply(Frame& frame, MessageType expected, uint64_t request_id, int timeout_ms);
  // The checks of expect() on a frame already received.
  void check(const Frame& frame, MessageType expected) const;
  nlohmann::json expect_json(MessageType expected, int timeout_ms);

  // Liveness. A send that makes no progress for timeout_ms fails (a stalled
  // peer with a full buffer cannot block us), and the kernel's keepalive
  // probes an idle link too.
  void set_timeout(int timeout_ms);
  // A HEARTBEAT if nothing was sent for `idle`; skipped (false) when another
  // thread is writing (then the link is not idle anyway). Never throws.
  bool heartbeat_if_idle(std::chrono::milliseconds idle) noexcept;
  // Reads and drops whatever frames are already waiting (HEARTBEATs, stale
  // answers) without blocking. Throws LinkError if the peer closed.
  void drain();
  Clock::time_point last_received() const { return Clock::time_point(Clock::duration(last_received_.load())); }
  Clock::time_point last_sent() const { return Clock::time_point(Clock::duration(last_sent_.load())); }

  // From now on every frame both ways is sealed (frame_cipher.h). Called by
  // the handshake once both sides have proved the key.
  void encrypt(const uint8_t send_key[kKeyBytes], const uint8_t recv_key[kKeyBytes]);
  bool encrypted() const { return cipher_ != nullptr; }

  void set_max_payload(uint64_t bytes) { max_payload_ = bytes; }
  uint64_t max_payload() const { return max_payload_; }
  const std::string& peer() const { return peer_; }
  int fd() const { return fd_; }
  // Wakes a reader blocked in another thread (it sees end of stream).
  void shutdown() noexcept;
  // After an ERROR sent on a protocol failure, before the connection goes:
  // ends our side and reads what the peer still sends (at most `most`, and
  // 1 MiB), so that the ERROR reaches it instead of a reset.
  void linger(std::chrono::milliseconds most) noexcept;

 private:
  // A big payload's pace: after its first window, the bytes so far must
  // keep up with the slowest link worth using, on average. A peer that
  // sends a byte a second keeps resetting a silence timeout, never this.
  struct Pace {
    Clock::time_point start;
    int window_ms = 0;
    uint64_t received = 0;
    Clock::time_point limit() const {
      return start + std::chrono::milliseconds(window_ms + received / kSlowestLinkBytesPerMs);
    }
  };
  // Fills dst by `deadline` (Clock::time_point::max(): no deadline). With
  // progress_ms > 0, every byte that arrives moves `deadline` to
  // progress_ms from then (a big payload on a slow link), but never past
  // what `pace` allows. `silent_ms` is what the timeout message reports.
  void read_exact(uint8_t* dst, size_t n, Clock::time_point& deadline, int progress_ms, int silent_ms,
                  Pace* pace = nullptr);
  // A payload's first piece of buffer; it doubles as bytes arrive.
  static constexpr size_t kFirstPayloadChunk = 64u << 10;
  // The slowest link a frame may take (2 Mbit/s).
  static constexpr uint64_t kSlowestLinkBytesPerMs = 256;
  // One frame: its header by header_deadline, its payload as read_frame's
  // callers decide. False for a HEARTBEAT.
  bool read_frame(Frame& frame, Clock::time_point header_deadline, int header_silent_ms,
                  Clock::time_point payload_deadline, int payload_progress_ms);
  void send_frame(MessageType type, uint64_t request_id, std::span<const std::span<const uint8_t>> parts);
  static int64_t now_ticks() { return Clock::now().time_since_epoch().count(); }

  int fd_;
  std::string peer_;
  uint64_t max_payload_ = kDefaultMaxPayload;
  std::mutex write_mutex_;  // frames from several threads never interleave
  std::atomic<int64_t> last_received_{now_ticks()}, last_sent_{now_ticks()};
  std::unique_ptr<FrameCipher> cipher_;
  std::vector<uint8_t> sealed_;  // the frame being sent, encrypted (under write_mutex_)
};

// Parses a JSON payload; throws ProtocolError (Malformed) on bad JSON.
nlohmann::json parse_json(const Frame& frame);
// "host:port" → (host, port); throws shoal::Error on bad syntax.
std::pair<std::string, int> split_address(const std::string& address);

}  // namespace shoal::wire
