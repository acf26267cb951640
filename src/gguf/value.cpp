#include "gguf/value.h"

#include <fmt/format.h>

#include "util/error.h"

namespace shoal::gguf {

const char* value_type_name(ValueType type) {
  static const char* names[] = {"u8",   "i8",  "u16",   "i16", "u32", "i32", "f32",
                                "bool", "str", "array", "u64", "i64", "f64"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(ValueType::COUNT));
  auto i = static_cast<size_t>(type);
  return i < static_cast<size_t>(ValueType::COUNT) ? names[i] : "?";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool Value::is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }

int64_t Value::as_int(const std::string& what) const {
  if (const auto* u = std::get_if<uint64_t>(&data)) {
    if (*u > static_cast<uint64_t>(INT64_MAX)) fail("{}: value {} is too large", what, *u);
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  fail("{}: expected an integer, found {}", what, value_type_name(type));
}

double Value::as_float(const std::string& what) const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (is_integer()) return static_cast<double>(as_int(what));
  fail("{}: expected a number, found {}", what, value_type_name(type));
}

bool Value::as_bool(const std::string& what) const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  fail("{}: expected a bool, found {}", what, value_type_name(type));
}

const std::string& Value::as_string(const std::string& what) const {
  if (const auto* s = std::get_if<std::string>(&data)) return *s;
  fail("{}: expected a string, found {}", what, value_type_name(type));
}

const Array& Value::as_array(const std::string& what) const {
  if (const auto* a = std::get_if<std::shared_ptr<Array>>(&data)) return **a;
  fail("{}: expected an array, found {}", what, value_type_name(type));
}

std::string Value::to_display(size_t max_items) const {
  switch (type) {
    case ValueType::STRING: {
      const auto& s = std::get<std::string>(data);
      std::string shown = s.size() > 80 ? s.substr(0, 77) + "..." : s;
      for (auto& c : shown)
        if (c == '\n') c = ' ';
      return fmt::format("\"{}\"", shown);
    }
    case ValueType::BOOL:
      return std::get<bool>(data) ? "true" : "false";
    case ValueType::FLOAT32: case ValueType::FLOAT64:
      return fmt::format("{}", std::get<double>(data));
    case ValueType::ARRAY: {
      const Array& a = *std::get<std::shared_ptr<Array>>(data);
      std::string out = fmt::format("[{} x {}: ", a.items.size(), value_type_name(a.element_type));
      for (size_t i = 0; i < a.items.size() && i < max_items; ++i)
        out += (i ? ", " : "") + a.items[i].to_display(max_items);
      if (a.items.size() > max_items) out += ", ...";
      return out + "]";
    }
    default:
      if (const auto* u = std::get_if<uint64_t>(&data)) return fmt::format("{}", *u);
      return fmt::format("{}", std::get<int64_t>(data));
  }
}

}  // namespace shoal::gguf
