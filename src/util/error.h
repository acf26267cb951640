#pragma once
// One error policy: every edge where input comes in (files, network, HTTP,
// command line) throws shoal::Error with a message a user can act on; the
// boundary (main, request handler) catches it and prints one line.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace shoal {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A device (or the host) had no room for an allocation: a worker answers
// OUT_OF_MEMORY, so the primary plans around it, rather than an internal error.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace shoal
