#pragma once
// `shoal worker --advertise`: a beacon (wire/beacon.h) every second on the
// worker's LAN — to the broadcast address of each IPv4 interface it listens
// on, and to 127.0.0.1 when it listens on loopback — so that a primary
// started with `--rpc auto` finds it. Needs the cluster key.
#include <atomic>
#include <string>
#include <thread>

namespace shoal {

class Advertiser {
 public:
  // host: the address the worker listens on ("0.0.0.0": every interface).
  Advertiser(std::string key, std::string host, int tcp_port, int beacon_port);
  ~Advertiser();
  Advertiser(const Advertiser&) = delete;
  Advertiser& operator=(const Advertiser&) = delete;

 private:
  void loop();

  std::string key_, host_;
  std::string worker_id_;  // random per run: one worker heard on several addresses is one
  int tcp_port_, beacon_port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shoal
