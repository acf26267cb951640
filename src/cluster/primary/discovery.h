#pragma once
// `--rpc auto`: listens for the beacons of advertising workers
// (wire/beacon.h) and reports every fresh one that carries our cluster key
// as "host:port" — at start for a short window, and for as long as the
// primary runs, so that a worker that appears later joins at the next
// re-plan, and the supervisor knows which candidates are still heard. A
// worker heard on several of its addresses is reported under the first.
#include <atomic>
#include <functional>
#include <mutex>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace shoal {

class Discovery {
 public:
  // Throws shoal::Error if the UDP port cannot be bound.
  Discovery(std::string key, int beacon_port, std::function<void(const std::string& address)> on_found);
  ~Discovery();
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  // Every worker heard so far, in the order first heard.
  std::vector<std::string> found() const;

  // Listens for `ms` and returns what was heard (for `shoal plan` and `ping`).
  static std::vector<std::string> listen_for(const std::string& key, int beacon_port, int ms);

 private:
  void loop();

  std::string key_;
  int fd_ = -1;
  std::function<void(const std::string&)> on_found_;
  mutable std::mutex mutex_;
  std::vector<std::string> found_;
  std::map<std::string, std::string> address_of_;  // worker id -> the address first heard
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shoal
