#pragma once
// A request's mistakes in OpenAI's words, for every parser that answers in
// OpenAI's error shape (chat, completions, Responses, llama-server's routes):
// each throws an ApiError 400 naming the field and its code.
#include <string>

#include <fmt/format.h>

#include "server/openai_types.h"

namespace shoal::server {

[[noreturn]] inline void bad_value(const std::string& field, const std::string& message) {
  throw ApiError(400, fmt::format("Invalid '{}': {}", field, message), "invalid_request_error", field,
                 "invalid_value");
}

[[noreturn]] inline void unsupported(const std::string& field, const std::string& what) {
  throw ApiError(400, fmt::format("'{}' is not supported: {}", field, what), "invalid_request_error", field,
                 "unsupported_parameter");
}

[[noreturn]] inline void missing_parameter(const std::string& field) {
  throw ApiError(400, fmt::format("Missing required parameter: '{}'.", field), "invalid_request_error", field,
                 "missing_required_parameter");
}

// A field that is absent or null: none, so the default stays (json and
// ordered_json alike).
template <typename Json>
const Json* field(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace shoal::server
