#pragma once
// A template that cannot be parsed or rendered throws TemplateError; the
// message names the template line, so a user can find the fault in the file.
#include <string>

#include "util/error.h"

namespace shoal::jinja {

class TemplateError : public shoal::Error {
 public:
  explicit TemplateError(const std::string& message) : shoal::Error(message) {}
};

// Thrown inside the interpreter without a line; the statement that runs it
// adds the line on the way out (TemplateError above).
class RenderFault : public std::runtime_error {
 public:
  explicit RenderFault(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fault(fmt::format_string<Args...> format, Args&&... args) {
  throw RenderFault(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace shoal::jinja
