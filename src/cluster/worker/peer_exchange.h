#pragma once
// A tensor group's all-gather between workers (RowExchange over the wire):
// each member opens one sealed link to every other member (the handshake a
// chain hop uses, role "peer", then TENSOR_LINK naming the group and its
// rank) and sends its shares on it as TENSOR_SHARE frames; it reads each
// other member's shares on the link that member opened. Members talk to
// each other directly: nothing of an exchange passes the primary.
//
// The links are made at load (GROUP_LINK, link()): members that cannot
// reach each other are found before any step runs, and the primary plans
// without the group.
//
// No HEARTBEAT crosses these links: between steps no one reads them, and a
// member's liveness is its primary link's business. Within a step a member
// that sends nothing for --worker-timeout is lost (LinkError naming it).
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/tensor_split_backend.h"
#include "cluster/wire/connection.h"

namespace shoal {

struct TensorGroup {
  uint64_t id = 0;                   // the primary's name for this group (one per stage it loads)
  int rank = 0;
  std::vector<std::string> members;  // addresses, by rank
  ShareWeights weights;              // by rank: the members' shares are in proportion (tensor_split_backend.h)
  int size() const { return static_cast<int>(members.size()); }
};

struct PeerLinkOptions {
  std::optional<std::string> key;
  int timeout_ms = 5000;
  bool plain_frames = false;
};

class PeerExchange : public RowExchange {
 public:
  PeerExchange(TensorGroup group, PeerLinkOptions options);
  ~PeerExchange() override;
  const TensorGroup& group() const { return group_; }
  // The link member `rank` opened to this one (its session hands it over).
  // A refused one (wrong host, a second claim) is remembered, so that a
  // wait for that member that runs out names the reason.
  void accept_link(int rank, std::shared_ptr<wire::Connection> conn);
  // Opens this member's link to every other member and waits until every
  // other member's link to it has come (each within the link timeout).
  // Throws a LinkError naming the first member it could not link with.
  void link();
  void all_gather(std::span<const float> mine, std::span<const std::span<float>> from) override;

 private:
  void connect_out(int peer);
  // This member's links to the others it has not linked to yet (a
  // failure names the member it could not reach).
  void connect_all();
  std::shared_ptr<wire::Connection> inbound(int peer);
  // Member `peer`'s share of this round, in one frame or several.
  void receive_share(int peer, std::span<float> into);
  void send_all(std::span<const uint8_t> bytes);
  // Returns once `in` has bytes to read, or after a short spin (then the read sleeps).
  static void await_share(wire::Connection& in);

  TensorGroup group_;
  PeerLinkOptions options_;
  uint64_t round_ = 0;  // all-gathers so far: each TENSOR_SHARE carries its number
  std::vector<std::unique_ptr<wire::Connection>> out_;
  std::mutex mutex_;  // in_ against accept_link
  std::condition_variable linked_;
  std::vector<std::shared_ptr<wire::Connection>> in_;
  std::vector<std::string> refused_;  // per rank: why its link was refused, if it was
  wire::Frame frame_;
  std::string broken_;  // why an exchange failed; empty while the group holds
};

}  // namespace shoal
