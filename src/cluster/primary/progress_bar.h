#pragma once
// Weights streaming to a worker, on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace shoal {

// "loading 127.0.0.1:50052  12.0/32.5 MiB  85.1 MiB/s  ETA 0.2 s" on stderr,
// redrawn in place on a terminal, printed once when done otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2)) {}
  void update(uint64_t sent, uint64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (!tty_ || (sent < total && now - last_ < std::chrono::milliseconds(100))) return;
    last_ = now;
    std::fprintf(stderr, "\r%s", line(sent, total).c_str());
    if (sent >= total) std::fputc('\n', stderr);
  }
  std::string line(uint64_t sent, uint64_t total) const {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = s > 0 ? sent / s : 0;
    return fmt::format("loading {}  {:.1f}/{:.1f} MiB  {:.1f} MiB/s  ETA {:.1f} s", label_, sent / 1048576.0,
                       total / 1048576.0, rate / 1048576.0, rate > 0 ? (total - sent) / rate : 0.0);
  }

 private:
  std::string label_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};


}  // namespace shoal
