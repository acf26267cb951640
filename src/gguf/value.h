#pragma once
// A GGUF metadata value: one of the scalar types, a string, or an array of
// values (arrays may nest).
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace shoal::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
  COUNT  // sentinel
};

const char* value_type_name(ValueType type);

struct Value;
struct Array {
  ValueType element_type = ValueType::UINT8;
  std::vector<Value> items;
};

struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<Array>> data;

  bool is_integer() const;
  bool is_float() const;
  bool is_string() const { return type == ValueType::STRING; }
  bool is_array() const { return type == ValueType::ARRAY; }

  // Checked conversions: throw shoal::Error naming `what` on a type mismatch.
  int64_t as_int(const std::string& what) const;
  double as_float(const std::string& what) const;  // integers convert too
  bool as_bool(const std::string& what) const;
  const std::string& as_string(const std::string& what) const;
  const Array& as_array(const std::string& what) const;

  // Short human-readable rendering (arrays abbreviated), for `shoal inspect`.
  std::string to_display(size_t max_items = 8) const;
};

}  // namespace shoal::gguf
