#pragma once
// The beacon a worker started with --advertise sends on its LAN (UDP
// broadcast, port 50053 by default): "worker W, holding this cluster key,
// listens on HOST, TCP port P". It carries an HMAC-SHA256 tag from the
// cluster key, a timestamp and a random id, so only key holders can make
// one, a forged or altered one is dropped, and a replayed one is too
// (stale, seen before, or sent from an address other than the HOST it
// names: a beacon copied off the air and sent from the copier's machine
// points nowhere). W, the worker's random instance id, lets a primary take
// a worker heard on several of its addresses once. The primary's
// authenticated handshake still follows: a beacon can at worst make a
// primary try a connection that fails within one handshake deadline.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace shoal::wire {

constexpr int kDefaultBeaconPort = 50053;
constexpr int kBeaconMaxAgeMs = 30000;  // older (or as much in the future) is dropped

// The datagram for worker `worker_id` listening on host:tcp_port (host: the
// IPv4 address the datagram is sent from), made at `now_ms` (Unix ms).
std::string make_beacon(const std::string& key, const std::string& host, int tcp_port, const std::string& worker_id,
                        int64_t now_ms);

struct BeaconInfo {
  int port = 0;
  std::string worker_id;
};

// Checks beacons and remembers the ids it has accepted, so each is taken once.
class BeaconVerifier {
 public:
  explicit BeaconVerifier(std::string key) : key_(std::move(key)) {}
  // The worker's TCP port and id if the datagram is a fresh beacon made
  // with our key and sent from the address it names (`source`, dotted
  // IPv4); nothing otherwise (never throws).
  std::optional<BeaconInfo> verify(const std::string& datagram, const std::string& source, int64_t now_ms);

 private:
  std::string key_;
  std::map<std::string, int64_t> seen_;  // id -> its timestamp, forgotten when stale
};

}  // namespace shoal::wire
