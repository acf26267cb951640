#pragma once
// What the catalogue and cluster-file readers share: the embedded TOML files
// parsed once, and a number read with its place named in the error.
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "util/error.h"

namespace shoal {

// An embedded data file (data/*.toml), parsed on first use.
inline toml::table parse_embedded_toml(const char* text, std::string_view name) {
  try {
    return toml::parse(std::string_view(text), name);
  } catch (const toml::parse_error& e) {
    fail("internal: the embedded {} does not parse: {}", name, e.what());
  }
}

// A number in lo..hi; `where` names the file and the entry.
template <class View>
double toml_number(View v, const std::string& where, const char* key, double lo, double hi) {
  const auto value = v.template value<double>();
  if (!value) fail("{}: '{}' must be a number", where, key);
  if (!(*value >= lo && *value <= hi)) fail("{}: '{}' = {} is outside {}..{}", where, key, *value, lo, hi);
  return *value;
}

}  // namespace shoal
