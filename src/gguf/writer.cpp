#include "gguf/writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "util/error.h"

namespace shoal::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian; this writer copies host bytes");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"
constexpr uint32_t kVersion = 3;

class Out {
 public:
  explicit Out(std::vector<uint8_t>& buf) : buf_(buf) {}
  template <typename T>
  void put(T v) {
    put_raw(&v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_raw(s.data(), s.size());
  }

 private:
  // resize + memcpy rather than vector::insert: GCC 12 reports a false
  // -Wstringop-overflow on small inserts.
  void put_raw(const void* p, size_t n) {
    size_t at = buf_.size();
    buf_.resize(at + n);
    if (n) std::memcpy(buf_.data() + at, p, n);
  }

  std::vector<uint8_t>& buf_;
};

// The integer payload of a value, range-checked against [lo, hi]. Value keeps
// unsigned types in uint64_t and signed ones in int64_t, but accept either so
// that hand-built Values work too.
template <typename T>
T checked_int(const Value& v, const std::string& key) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<T>::max())) fail("GGUF writer: '{}': {} out of range", key, *u);
    return static_cast<T>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v.data)) {
    if constexpr (std::is_unsigned_v<T>) {
      if (*i < 0 || static_cast<uint64_t>(*i) > std::numeric_limits<T>::max())
        fail("GGUF writer: '{}': {} out of range", key, *i);
    } else {
      if (*i < std::numeric_limits<T>::min() || *i > std::numeric_limits<T>::max())
        fail("GGUF writer: '{}': {} out of range", key, *i);
    }
    return static_cast<T>(*i);
  }
  fail("GGUF writer: '{}' is declared {} but holds no integer", key, value_type_name(v.type));
}

// Writes the payload of `v` (no type tag: the caller writes it where GGUF
// wants one). Throws when the payload does not match the declared type.
void put_value(Out& out, const Value& v, const std::string& key) {
  switch (v.type) {
    case ValueType::UINT8: out.put(checked_int<uint8_t>(v, key)); break;
    case ValueType::INT8: out.put(checked_int<int8_t>(v, key)); break;
    case ValueType::UINT16: out.put(checked_int<uint16_t>(v, key)); break;
    case ValueType::INT16: out.put(checked_int<int16_t>(v, key)); break;
    case ValueType::UINT32: out.put(checked_int<uint32_t>(v, key)); break;
    case ValueType::INT32: out.put(checked_int<int32_t>(v, key)); break;
    case ValueType::UINT64: out.put(checked_int<uint64_t>(v, key)); break;
    case ValueType::INT64: out.put(checked_int<int64_t>(v, key)); break;
    case ValueType::FLOAT32: out.put(static_cast<float>(v.as_float(key))); break;
    case ValueType::FLOAT64: out.put(v.as_float(key)); break;
    case ValueType::BOOL: out.put<uint8_t>(v.as_bool(key) ? 1 : 0); break;
    case ValueType::STRING: out.put_string(v.as_string(key)); break;
    case ValueType::ARRAY: {
      const Array& a = v.as_array(key);
      if (a.element_type >= ValueType::COUNT) fail("GGUF writer: '{}' has a bad array element type", key);
      out.put(static_cast<uint32_t>(a.element_type));
      out.put<uint64_t>(a.items.size());
      for (const Value& item : a.items) {
        if (item.type != a.element_type)
          fail("GGUF writer: '{}' is an array of {} holding a {}", key, value_type_name(a.element_type),
               value_type_name(item.type));
        put_value(out, item, key);
      }
      break;
    }
    default:
      fail("GGUF writer: '{}' has unknown value type {}", key, static_cast<uint32_t>(v.type));
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

Value make_u32(uint32_t v) { return Value{ValueType::UINT32, uint64_t{v}}; }
Value make_i32(int32_t v) { return Value{ValueType::INT32, int64_t{v}}; }
Value make_u64(uint64_t v) { return Value{ValueType::UINT64, v}; }
Value make_f32(float v) { return Value{ValueType::FLOAT32, double{v}}; }
Value make_bool(bool v) { return Value{ValueType::BOOL, v}; }
Value make_string(std::string v) { return Value{ValueType::STRING, std::move(v)}; }
Value make_array(ValueType element_type, std::vector<Value> items) {
  auto a = std::make_shared<Array>();
  a->element_type = element_type;
  a->items = std::move(items);
  return Value{ValueType::ARRAY, std::move(a)};
}
Value make_string_array(const std::vector<std::string>& items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (const auto& s : items) values.push_back(make_string(s));
  return make_array(ValueType::STRING, std::move(values));
}

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > UINT32_MAX)
    fail("GGUF writer: alignment {} is not a power of two", alignment);
  if (alignment != 32) add("general.alignment", make_u32(static_cast<uint32_t>(alignment)));
}

void Writer::add(const std::string& key, Value value) {
  for (const auto& [k, v] : metadata_)
    if (k == key) fail("GGUF writer: duplicate metadata key '{}'", key);
  if (key == "general.alignment" &&
      (value.type != ValueType::UINT32 || static_cast<uint64_t>(value.as_int(key)) != alignment_))
    fail("GGUF writer: general.alignment must be the u32 given to the Writer ({})", alignment_);
  // Serialize once now so that a bad value fails here, next to its cause.
  std::vector<uint8_t> scratch;
  Out out(scratch);
  put_value(out, value, key);
  metadata_.emplace_back(key, std::move(value));
}

void Writer::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                        size_t size) {
  for (const Tensor& t : tensors_)
    if (t.name == name) fail("GGUF writer: duplicate tensor name '{}'", name);
  if (shape.empty() || shape.size() > 4) fail("GGUF writer: tensor '{}' has {} dimensions (1 to 4)", name, shape.size());
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) fail("GGUF writer: tensor '{}' has dimension {}", name, d);
    n *= d;
  }
  const DTypeInfo& info = dtype_info(type);
  if (shape[0] % info.block_size != 0)
    fail("GGUF writer: tensor '{}' rows of {} are not whole {} blocks", name, shape[0], info.name);
  size_t expected = row_bytes(type, shape[0]) * static_cast<size_t>(n / shape[0]);
  if (size != expected) fail("GGUF writer: tensor '{}' has {} bytes, its type and shape need {}", name, size, expected);
  uint64_t offset = align_up(data_size_, alignment_);
  tensors_.push_back(Tensor{name, type, shape, static_cast<const uint8_t*>(data), size, offset});
  data_size_ = offset + size;
}

std::vector<uint8_t> Writer::header_bytes() const {
  std::vector<uint8_t> buf;
  Out out(buf);
  out.put(kMagic);
  out.put(kVersion);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    out.put_string(key);
    out.put(static_cast<uint32_t>(value.type));
    put_value(out, value, key);
  }
  for (const Tensor& t : tensors_) {
    out.put_string(t.name);
    out.put<uint32_t>(t.shape.size());
    for (int64_t d : t.shape) out.put<uint64_t>(d);
    out.put(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(t.offset);
  }
  buf.resize(align_up(buf.size(), alignment_), 0);
  return buf;
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> buf = header_bytes();
  size_t base = buf.size();
  buf.resize(base + data_size_, 0);
  for (const Tensor& t : tensors_) std::memcpy(buf.data() + base + t.offset, t.data, t.size);
  return buf;
}

void Writer::write(const std::string& path) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) fail("cannot create {}: {}", path, std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f.get()) != n) fail("cannot write {}: {}", path, std::strerror(errno));
  };
  std::vector<uint8_t> header = header_bytes();
  put(header.data(), header.size());
  // Tensors stream straight from the caller's memory; only the padding
  // between them is written from here.
  static const uint8_t zeros[256] = {};
  uint64_t pos = 0;
  for (const Tensor& t : tensors_) {
    for (uint64_t pad = t.offset - pos; pad > 0;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(zeros)));
      put(zeros, n);
      pad -= n;
    }
    put(t.data, t.size);
    pos = t.offset + t.size;
  }
  FILE* raw = f.release();
  if (std::fclose(raw) != 0) fail("cannot write {}: {}", path, std::strerror(errno));
}

}  // namespace shoal::gguf
