#include "cluster/worker/peer_exchange.h"

#include <poll.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

#include "cluster/wire/handshake.h"

namespace shoal {

using wire::ErrorCode;
using wire::MessageType;
using wire::ProtocolError;

namespace {
// Shares up to this size are sent before reading (the sockets' buffers take
// them); bigger ones from a thread, so that two members sending to each
// other at once cannot both wait on full buffers.
constexpr size_t kInlineSendBytes = 32 << 10;
constexpr std::chrono::microseconds kSpinBeforeSleep{200};
constexpr size_t kShareFrameBytes = 256 << 10;
}  // namespace

PeerExchange::PeerExchange(TensorGroup group, PeerLinkOptions options)
    : group_(std::move(group)),
      options_(std::move(options)),
      out_(group_.size()),
      in_(group_.size()),
      refused_(group_.size()) {}

PeerExchange::~PeerExchange() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& c : in_)
    if (c) c->shutdown();
}

void PeerExchange::accept_link(int rank, std::shared_ptr<wire::Connection> conn) {
  if (rank < 0 || rank >= group_.size() || rank == group_.rank)
    throw ProtocolError(ErrorCode::BadRequest, fmt::format("TENSOR_LINK from rank {} of a group of {} (this is rank {})",
                                                           rank, group_.size(), group_.rank));
  const auto refuse = [&](std::string why) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (refused_[rank].empty()) refused_[rank] = why;
    }
    throw ProtocolError(ErrorCode::BadRequest, why);
  };
  // The link must come from the member's host, when the primary named it by address.
  const std::string host = wire::split_address(group_.members[rank]).first;
  const std::string from = wire::split_address(conn->peer()).first;
  if (host.find_first_not_of("0123456789.") == std::string::npos && host != from)
    refuse(fmt::format("TENSOR_LINK as member {} ({}) came from {}", rank, group_.members[rank], from));
  std::unique_lock<std::mutex> lock(mutex_);
  // One link per member for the group's life: a second claim would cut the
  // one a step may be reading (a member that lost its link fails the group;
  // the primary loads a new one).
  if (in_[rank]) {
    lock.unlock();
    refuse(fmt::format("member {} of tensor group {:016x} is linked already", rank, group_.id));
  }
  in_[rank] = std::move(conn);
  linked_.notify_all();
}

void PeerExchange::link() {
  connect_all();
  for (int p = 0; p < group_.size(); ++p)
    if (p != group_.rank) inbound(p);
}

void PeerExchange::connect_all() {
  for (int p = 0; p < group_.size(); ++p) {
    if (p == group_.rank || out_[p]) continue;
    try {
      connect_out(p);
    } catch (const std::exception& e) {
      throw wire::LinkError(wire::LinkError::Kind::Failed, group_.members[p],
                            fmt::format("could not link to tensor group member {}: {}", group_.members[p], e.what()));
    }
  }
}

void PeerExchange::connect_out(int peer) {
  const std::string& address = group_.members[peer];
  auto conn = wire::Connection::connect(address, options_.timeout_ms);
  conn->set_timeout(options_.timeout_ms);
  wire::client_handshake(*conn, wire::Role::Peer, options_.key, {}, options_.plain_frames, options_.timeout_ms);
  conn->send_json(MessageType::TensorLink, 0, {{"group", fmt::format("{:016x}", group_.id)}, {"rank", group_.rank}});
  out_[peer] = std::move(conn);
}

std::shared_ptr<wire::Connection> PeerExchange::inbound(int peer) {
  // A refused claim does not end the wait: the member itself may still come
  // (the claim may have been someone else's); it only explains a timeout.
  std::unique_lock<std::mutex> lock(mutex_);
  if (linked_.wait_for(lock, std::chrono::milliseconds(options_.timeout_ms), [&] { return in_[peer] != nullptr; }))
    return in_[peer];
  throw wire::LinkError(wire::LinkError::Kind::Timeout, group_.members[peer],
                        fmt::format("tensor group member {} did not link to this one within {:.1f} s{}",
                                    group_.members[peer], options_.timeout_ms / 1000.0,
                                    refused_[peer].empty() ? "" : fmt::format(" (a link was refused: {})",
                                                                              refused_[peer])));
}

void PeerExchange::send_all(std::span<const uint8_t> bytes) {
  // In frames of at most kShareFrameBytes: the receiver reads and opens one
  // while the next is sealed and sent (one frame of a prompt's whole share
  // would be sealed, sent, read and opened in turn).
  for (int p = 0; p < group_.size(); ++p) {
    if (p == group_.rank) continue;
    size_t at = 0;
    do {
      const std::span<const uint8_t> parts[] = {bytes.subspan(at, std::min(kShareFrameBytes, bytes.size() - at))};
      out_[p]->send(MessageType::TensorShare, round_, parts);
      at += parts[0].size();
    } while (at < bytes.size());
  }
}

void PeerExchange::receive_share(int peer, std::span<float> into) {
  const std::shared_ptr<wire::Connection> in = inbound(peer);
  auto* dst = reinterpret_cast<uint8_t*>(into.data());
  size_t at = 0;
  try {
    do {
      await_share(*in);
      in->expect(frame_, MessageType::TensorShare, options_.timeout_ms);
      if (frame_.header.request_id != round_ || frame_.payload.size() > into.size_bytes() - at ||
          (frame_.payload.empty() && !into.empty()))
        throw ProtocolError(ErrorCode::Malformed,
                            fmt::format("tensor group member {} sent {} bytes of share {}; expected share {} of {} "
                                        "bytes, {} in", group_.members[peer], frame_.payload.size(),
                                        frame_.header.request_id, round_, into.size_bytes(), at));
      std::memcpy(dst + at, frame_.payload.data(), frame_.payload.size());
      at += frame_.payload.size();
    } while (at < into.size_bytes());
  } catch (const wire::LinkError& e) {
    // Named by the member's address, not the link's port.
    throw wire::LinkError(e.kind(), group_.members[peer],
                          fmt::format("tensor group member {}: {}", group_.members[peer], e.what()));
  }
}

void PeerExchange::await_share(wire::Connection& in) {
  // The other members compute the same share at the same time: their rows
  // usually come within microseconds, sooner than a sleeping thread wakes.
  // So look for them without sleeping a little while first.
  const auto until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  pollfd p{in.fd(), POLLIN, 0};
  while (::poll(&p, 1, 0) == 0 && std::chrono::steady_clock::now() < until) {
  }
}

void PeerExchange::all_gather(std::span<const float> mine, std::span<const std::span<float>> from) {
  if (!broken_.empty()) fail("{}", broken_);
  try {
    ++round_;
    connect_all();  // made at load (link()); a no-op then
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(mine.data()), mine.size_bytes());
    std::exception_ptr send_failed;
    std::thread sender;
    if (bytes.size() <= kInlineSendBytes) {
      send_all(bytes);
    } else {
      sender = std::thread([&] {
        try {
          send_all(bytes);
        } catch (...) {
          send_failed = std::current_exception();
        }
      });
    }
    struct Join {
      std::thread& t;
      ~Join() {
        if (t.joinable()) t.join();  // a send to a lost member fails within the send timeout
      }
    } join{sender};
    for (int p = 0; p < group_.size(); ++p)
      if (p != group_.rank) receive_share(p, from[p]);
    if (sender.joinable()) sender.join();
    if (send_failed) std::rethrow_exception(send_failed);
  } catch (const std::exception& e) {
    // The members no longer agree on where they are: every later step fails
    // at once, until the primary loads a new group.
    // Said as a step's failure, not the primary's: a peer's malformed share
    // must not end the primary's session.
    broken_ = fmt::format("tensor group exchange failed: {}", e.what());
    throw Error(broken_);
  }
}

}  // namespace shoal
