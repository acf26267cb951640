#include "cluster/worker/advertiser.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/rand.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "cluster/wire/beacon.h"
#include "cluster/wire/keyed_hash.h"
#include "util/log.h"

namespace shoal {
namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

// Where the beacons go, and from which of this machine's addresses: the
// broadcast address of each interface the worker listens on (sent from the
// interface's address), and loopback for a worker on loopback. The beacon
// names the address it is sent from; a primary takes it only from there.
struct Destination {
  in_addr to{}, from{};
};

std::vector<Destination> destinations(const std::string& host) {
  std::vector<Destination> out;
  if (is_loopback(host) || host == "0.0.0.0") {
    Destination lo;
    inet_pton(AF_INET, "127.0.0.1", &lo.to);
    lo.from = lo.to;
    if (is_loopback(host) && host != "localhost") inet_pton(AF_INET, host.c_str(), &lo.from);
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
    Destination d;
    d.to.s_addr = a.s_addr | ~reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr;
    d.from = a;
    out.push_back(d);
  }
  ::freeifaddrs(ifs);
  return out;
}

// One datagram from `from` (IP_PKTINFO picks the source address, so a
// worker on 0.0.0.0 sends each beacon from the address it names).
void send_from(int fd, const std::string& datagram, const Destination& d, int port) {
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr = d.to;
  iovec iov{const_cast<char*>(datagram.data()), datagram.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in_pktinfo))] = {};
  msghdr msg{};
  msg.msg_name = &dst;
  msg.msg_namelen = sizeof(dst);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = IPPROTO_IP;
  c->cmsg_type = IP_PKTINFO;
  c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
  in_pktinfo info{};
  info.ipi_spec_dst = d.from;
  std::memcpy(CMSG_DATA(c), &info, sizeof(info));
  ::sendmsg(fd, &msg, 0);
}

std::string random_id() {
  unsigned char id[8];
  RAND_bytes(id, sizeof(id));
  return to_hex(id, sizeof(id));
}

}  // namespace

Advertiser::Advertiser(std::string key, std::string host, int tcp_port, int beacon_port)
    : key_(std::move(key)), host_(std::move(host)), worker_id_(random_id()), tcp_port_(tcp_port),
      beacon_port_(beacon_port) {
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
    const std::vector<Destination> to = destinations(host_);
    for (const Destination& d : to) {
      char from[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &d.from, from, sizeof(from));
      send_from(fd, wire::make_beacon(key_, from, tcp_port_, worker_id_, unix_ms()), d, beacon_port_);
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
