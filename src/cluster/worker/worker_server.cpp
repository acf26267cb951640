#include "cluster/worker/worker_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <system_error>
#include <thread>

#include "backend/vulkan/vulkan_devices.h"
#include "cluster/wire/handshake.h"
#include "cluster/worker/worker_session.h"
#include "util/log.h"

namespace shoal {

WorkerServer::WorkerServer(WorkerOptions options) : options_(std::move(options)) {
  pool_ = std::make_unique<ThreadPool>(options_.threads > 0 ? options_.threads : ThreadPool::default_threads());
  device_ = probe_local_cpu(*pool_);
  device_choice_ = resolve_device(parse_device(options_.device));
  if (device_choice_.vulkan) {
    // The GPU's memory is what this worker lends; its speed is unmeasured.
    std::string why;
    const VulkanDeviceInfo gpu = list_vulkan_devices(&why).at(static_cast<size_t>(device_choice_.index));
    device_.backend = gpu.name;
    device_.kind = "vulkan";
    device_.total_memory = gpu.memory;
    device_.free_memory = gpu.free;
    device_.matvec_gbps = 0.0;
    device_.matmul_gflops = 0.0;
  }
  if (options_.mem_limit > 0) device_.free_memory = std::min(device_.free_memory, options_.mem_limit);
  if (!options_.cache_dir.empty()) cache_ = std::make_unique<WeightCache>(options_.cache_dir, options_.cache_max);
  if (!options_.models_dir.empty()) local_models_ = std::make_unique<LocalModels>(options_.models_dir);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(options_.host.c_str(), std::to_string(options_.port).c_str(), &hints, &res);
  if (rc != 0) fail("cannot resolve {}: {}", options_.host, gai_strerror(rc));
  listen_fd_ = ::socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (listen_fd_ < 0 || ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) != 0 || ::listen(listen_fd_, 64) != 0) {
    int e = errno;
    ::freeaddrinfo(res);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    fail("cannot listen on {}:{}: {}", options_.host, options_.port, std::strerror(e));
  }
  ::freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

WorkerServer::~WorkerServer() {
  stop();
  while (!close_sessions(std::chrono::seconds(1))) {
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

bool WorkerServer::close_sessions(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(threads_mutex_);
  for (const auto& w : session_conns_)
    if (auto c = w.lock()) c->shutdown();
  return threads_done_.wait_for(lock, wait, [&] { return live_threads_ == 0; });
}

void WorkerServer::stop() {
  stopping_ = true;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
}

void WorkerServer::run() {
  if (!heartbeat_thread_.joinable()) heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
  bool told_fd_shortage = false;
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, 500);  // wakes now and then to notice stop()
    if (rc <= 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays in the backlog and poll() would say
        // "ready" at once: back off instead of spinning.
        if (!told_fd_shortage) spdlog::warn("out of file descriptors ({}): pausing accepts", std::strerror(errno));
        told_fd_shortage = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      continue;
    }
    told_fd_shortage = false;
    char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV);
    ++stats_.connections;
    auto conn = std::make_shared<wire::Connection>(fd, std::string(host) + ":" + port);
    conn->set_max_payload(options_.max_payload);
    conn->set_timeout(options_.timeout_ms);
    if (!start_session(conn)) ++stats_.refused;
  }
}

void WorkerServer::authenticated(const wire::Connection* conn) {
  std::lock_guard<std::mutex> lock(threads_mutex_);
  std::erase_if(pending_, [conn](const auto& w) {
    auto c = w.lock();
    return !c || c.get() == conn;
  });
}

namespace {
// "host:port" → host (the peer names are numeric).
std::string host_of(const std::string& peer) { return peer.substr(0, peer.rfind(':')); }
}  // namespace

void WorkerServer::evict_one_pending() {
  std::map<std::string, int> per_host;
  for (const auto& w : pending_)
    if (auto c = w.lock()) ++per_host[host_of(c->peer())];
  std::string busiest;
  int most = 0;
  for (const auto& [host, n] : per_host)
    if (n > most) busiest = host, most = n;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    auto c = it->lock();
    if (c && host_of(c->peer()) != busiest) continue;
    if (c) {
      spdlog::debug("handshake slots full: closing the oldest of {}, {}", busiest, c->peer());
      c->shutdown();
    }
    pending_.erase(it);
    return;
  }
}

bool WorkerServer::start_session(std::shared_ptr<wire::Connection> conn) {
  // Evicted connections leave their slot when their thread notices; past
  // twice the cap, newcomers wait their turn like everyone else.
  if (handshakes_.load() >= 2 * options_.max_handshakes || sessions_.load() >= options_.max_sessions) {
    conn->send_error(wire::ErrorCode::TooManyConnections, "worker has too many connections; try again later");
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(threads_mutex_);
    std::erase_if(pending_, [](const auto& w) { return w.expired(); });
    while (static_cast<int>(pending_.size()) >= options_.max_handshakes) evict_one_pending();
    pending_.push_back(conn);
    std::erase_if(session_conns_, [](const auto& w) { return w.expired(); });
    session_conns_.push_back(conn);
    ++live_threads_;
  }
  ++handshakes_;
  try {
    std::thread([this, conn] {
      WorkerSession(*this, conn).run();
      std::lock_guard<std::mutex> lock(threads_mutex_);
      if (--live_threads_ == 0) threads_done_.notify_all();
    }).detach();
    return true;
  } catch (const std::system_error& e) {
    // No thread to be had (memory or process limits): refuse this one, live on.
    --handshakes_;
    {
      std::lock_guard<std::mutex> lock(threads_mutex_);
      --live_threads_;
      std::erase_if(pending_, [&](const auto& w) { return w.lock() == conn; });
    }
    spdlog::warn("cannot start a thread for {}: {}", conn->peer(), e.what());
    conn->send_error(wire::ErrorCode::TooManyConnections, "worker cannot take another connection now");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return false;
  }
}

void WorkerServer::keep_alive(const std::shared_ptr<wire::Connection>& conn) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(kept_alive_, [](const auto& w) { return w.expired(); });
  kept_alive_.push_back(conn);
}

void WorkerServer::heartbeat_loop() {
  const auto interval = std::chrono::milliseconds(std::max(50, options_.timeout_ms / 4));
  std::vector<std::shared_ptr<wire::Connection>> links;
  while (!stopping_) {
    std::this_thread::sleep_for(interval / 2);
    links.clear();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& w : kept_alive_)
        if (auto c = w.lock()) links.push_back(std::move(c));
    }
    for (const auto& c : links) c->heartbeat_if_idle(interval);
  }
}

nlohmann::json WorkerServer::hello_info() {
  const uint64_t used = memory_in_use();
  const uint64_t lendable = device_.free_memory > used ? device_.free_memory - used : 0;
  return {{"device",
           {{"backend", device_.backend},
            {"kind", device_.kind},
            {"simd", device_.simd},
            {"total_memory", device_.total_memory},
            {"free_memory", lendable},
            {"threads", pool_->size()},
            {"matvec_gbps", device_.matvec_gbps},
            {"matmul_gflops", device_.matmul_gflops}}},
          {"capabilities", {"chain", "wire-f16", "wire-bf16", "wire-q8_0", "weight-cache", "models-dir", "link-probe", "probe",
                            "rows-out"}}};
}

uint64_t WorkerServer::memory_in_use() {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t used = 0;
  for (const auto& [id, s] : stages_) used += s->weight_bytes + s->kv_bytes + s->grouped_bytes;
  return used;
}

nlohmann::json WorkerServer::stats_json() {
  size_t n_stages;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    n_stages = stages_.size();
  }
  return {{"weight_bytes_received", stats_.weight_bytes_received.load()},
          {"tensors_received", stats_.tensors_received.load()},
          {"tensors_from_cache", stats_.tensors_from_cache.load()},
          {"tensors_from_models_dir", stats_.tensors_from_models_dir.load()},
          {"stages_loaded", stats_.stages_loaded.load()},
          {"stages", n_stages},
          {"forwards", stats_.forwards.load()},
          {"forward_rows", stats_.forward_rows.load()},
          {"result_rows", stats_.result_rows.load()},
          {"connections", stats_.connections.load()},
          {"refused", stats_.refused.load()},
          {"timed_out", stats_.timed_out.load()},
          {"memory_in_use", memory_in_use()},
          {"cache_bytes", cache_ ? cache_->bytes() : 0}};
}

}  // namespace shoal
