#include "cluster/worker_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "cluster/handshake.h"
#include "cluster/worker_session.h"
#include "util/log.h"

namespace shoal {

WorkerServer::WorkerServer(WorkerOptions options) : options_(std::move(options)) {
  pool_ = std::make_unique<ThreadPool>(options_.threads > 0 ? options_.threads : ThreadPool::default_threads());
  device_ = probe_local_cpu(*pool_);
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
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void WorkerServer::stop() {
  stopping_ = true;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
}

void WorkerServer::run() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, 500);  // wakes now and then to notice stop()
    if (rc <= 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV);
    ++stats_.connections;
    auto conn = std::make_shared<wire::Connection>(fd, std::string(host) + ":" + port);
    conn->set_max_payload(options_.max_payload);
    std::thread([this, conn] { WorkerSession(*this, conn).run(); }).detach();
  }
}

nlohmann::json WorkerServer::hello_info() {
  const uint64_t used = memory_in_use();
  const uint64_t lendable = device_.free_memory > used ? device_.free_memory - used : 0;
  return {{"device",
           {{"backend", device_.backend},
            {"total_memory", device_.total_memory},
            {"free_memory", lendable},
            {"threads", pool_->size()},
            {"matvec_gbps", device_.matvec_gbps},
            {"matmul_gflops", device_.matmul_gflops}}},
          {"capabilities", {"chain", "wire-f16", "wire-bf16", "wire-q8_0", "weight-cache", "models-dir"}}};
}

uint64_t WorkerServer::memory_in_use() {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t used = 0;
  for (const auto& [id, s] : stages_) used += s->weight_bytes + s->kv_bytes;
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
          {"connections", stats_.connections.load()},
          {"refused", stats_.refused.load()},
          {"memory_in_use", memory_in_use()},
          {"cache_bytes", cache_ ? cache_->bytes() : 0}};
}

}  // namespace shoal
