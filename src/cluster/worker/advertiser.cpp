#include "cluster/worker/advertiser.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "cluster/wire/beacon.h"
#include "util/log.h"

namespace shoal {
namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

// Where the beacons go: the broadcast address of each interface the worker
// listens on, and loopback for a worker on loopback.
std::vector<in_addr> destinations(const std::string& host) {
  std::vector<in_addr> out;
  if (is_loopback(host) || host == "0.0.0.0") {
    in_addr lo{};
    inet_pton(AF_INET, "127.0.0.1", &lo);
    out.push_back(lo);
  }
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
        !(i->ifa_flags & IFF_BROADCAST) || !i->ifa_netmask)
      continue;
    const in_addr a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    char addr[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a, addr, sizeof(addr));
    if (host != "0.0.0.0" && host != addr) continue;
    // The subnet's broadcast address from address and mask: an address added
    // without "brd" has none of its own.
    in_addr broadcast{};
    broadcast.s_addr = a.s_addr | ~reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr;
    out.push_back(broadcast);
  }
  ::freeifaddrs(ifs);
  return out;
}

}  // namespace

Advertiser::Advertiser(std::string key, std::string host, int tcp_port, int beacon_port)
    : key_(std::move(key)), host_(std::move(host)), tcp_port_(tcp_port), beacon_port_(beacon_port) {
  thread_ = std::thread([this] { loop(); });
}

Advertiser::~Advertiser() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Advertiser::loop() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    spdlog::warn("advertise: no UDP socket; not advertising");
    return;
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof(one));
  // From the address the worker listens on, so the primary connects there.
  if (host_ != "0.0.0.0" && !is_loopback(host_)) {
    sockaddr_in src{};
    src.sin_family = AF_INET;
    if (inet_pton(AF_INET, host_.c_str(), &src.sin_addr) == 1) ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src));
  }
  bool told = false;
  for (int n = 0; !stop_; ++n) {
    const std::vector<in_addr> to = destinations(host_);
    for (const in_addr& a : to) {
      const std::string beacon = wire::make_beacon(key_, tcp_port_, unix_ms());
      sockaddr_in dst{};
      dst.sin_family = AF_INET;
      dst.sin_port = htons(static_cast<uint16_t>(beacon_port_));
      dst.sin_addr = a;
      ::sendto(fd, beacon.data(), beacon.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof(dst));
    }
    if (!told) {
      spdlog::info("advertising port {} on {} network(s), UDP port {}", tcp_port_, to.size(), beacon_port_);
      told = true;
    }
    // A few quick ones first, so a primary that is listening now finds it at once.
    const int wait_ms = n < 3 ? 200 : 1000;
    for (int t = 0; t < wait_ms / 50 && !stop_; ++t) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::close(fd);
}

}  // namespace shoal
