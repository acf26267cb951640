#pragma once
// A JSON text's brackets outside its strings, found without parsing it: how
// deep a request body nests (refused before the parser recurses into it),
// and where an object a model wrote among prose ends (tool calls).
#include <cstddef>
#include <string_view>

namespace shoal::server {

// Calls at(i, depth) at each bracket outside strings from `start` on, with
// the depth after it (an opening bracket deepens, a closing one returns);
// stops when at() returns false.
template <typename At>
void walk_json_brackets(std::string_view s, size_t start, At at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (!at(i, ++depth)) return;
    } else if (c == '}' || c == ']') {
      if (!at(i, --depth)) return;
    }
  }
}

}  // namespace shoal::server
