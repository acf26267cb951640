#include "cluster/primary/discovery.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "cluster/wire/beacon.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal {

Discovery::Discovery(std::string key, int beacon_port, std::function<void(const std::string&)> on_found)
    : key_(std::move(key)), on_found_(std::move(on_found)) {
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd_ >= 0) {
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(beacon_port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    if (fd_ >= 0) ::close(fd_);
    fail("cannot listen for worker beacons on UDP port {}: {}", beacon_port, std::strerror(e));
  }
  thread_ = std::thread([this] { loop(); });
}

Discovery::~Discovery() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
}

std::vector<std::string> Discovery::found() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return found_;
}

void Discovery::loop() {
  wire::BeaconVerifier verifier(key_);
  char buf[2048];
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    const ssize_t n = ::recvfrom(fd_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) continue;
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &from.sin_addr, host, sizeof(host));
    const auto beacon = verifier.verify(std::string(buf, static_cast<size_t>(n)), host, now);
    if (!beacon) continue;  // not ours: another key, forged, stale, replayed or sent from elsewhere
    std::string address = std::string(host) + ":" + std::to_string(beacon->port);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto [it, fresh] = address_of_.emplace(beacon->worker_id, address);
      address = it->second;
      if (fresh) {
        found_.push_back(address);
        spdlog::info("discovered worker {}", address);
      }
    }
    if (on_found_) on_found_(address);
  }
}

std::vector<std::string> Discovery::listen_for(const std::string& key, int beacon_port, int ms) {
  Discovery d(key, beacon_port, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return d.found();
}

}  // namespace shoal
