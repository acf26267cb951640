#pragma once
// The beacon a worker started with --advertise sends on its LAN (UDP
// broadcast, port 50053 by default): "a worker with this cluster key listens
// on TCP port P". It carries an HMAC-SHA256 tag from the cluster key, a
// timestamp and a random id, so only key holders can make one, a forged or
// altered one is dropped, and a replayed one is too (stale, or seen before).
// The worker's address is where the datagram came from, and the primary's
// authenticated handshake still follows: a beacon can at worst make a
// primary try a connection that fails.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace shoal::wire {

constexpr int kDefaultBeaconPort = 50053;
constexpr int kBeaconMaxAgeMs = 30000;  // older (or as much in the future) is dropped

// The datagram for a worker listening on `tcp_port`, made at `now_ms` (Unix ms).
std::string make_beacon(const std::string& key, int tcp_port, int64_t now_ms);

// Checks beacons and remembers the ids it has accepted, so each is taken once.
class BeaconVerifier {
 public:
  explicit BeaconVerifier(std::string key) : key_(std::move(key)) {}
  // The worker's TCP port if the datagram is a fresh beacon made with our
  // key; nothing otherwise (never throws).
  std::optional<int> verify(const std::string& datagram, int64_t now_ms);

 private:
  std::string key_;
  std::map<std::string, int64_t> seen_;  // id -> its timestamp, forgotten when stale
};

}  // namespace shoal::wire
