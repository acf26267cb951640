#include "gguf/reader.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "util/error.h"

namespace shoal::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 4;        // nested arrays deeper than this are refused
constexpr uint64_t kMaxStringBytes = 1ull << 30;
// The memory a file's metadata may take once read, whatever the file's size.
// Values are held as `Value`s (48 bytes each, so a u8 array grows 48x, an
// array of empty strings 6x): without a bound, a 100 MB crafted array would
// ask for 4.8 GB. The largest real tokenizers take a few tens of MiB
// (qwen2.5: 151k tokens, their types and 151k merges, about 25 MiB counted
// this way; gemma3: 262k tokens, scores and types, about 45 MiB).
constexpr uint64_t kMaxMetadataBytes = 256ull << 20;

// Bounds-checked little-endian reads over the file bytes; every failure
// names the offset where the missing or bad data starts.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // The length a string at the cursor declares (0 if truncated: read_string
  // reports that), without reading it.
  uint64_t peek_length() const {
    uint64_t len = 0;
    if (remaining() >= sizeof len) std::memcpy(&len, data_ + pos_, sizeof len);
    return len;
  }

  std::string read_string(const char* what) {
    size_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > kMaxStringBytes || len > remaining())
      error(at, "{} has length {} but only {} bytes remain", what, len, remaining());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  void need(size_t n, const char* what) {
    if (n > remaining()) error(pos_, "truncated: {} needs {} bytes, {} remain", what, n, remaining());
  }

  template <typename... Args>
  [[noreturn]] void error(size_t offset, fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: invalid GGUF at byte offset {}: {}", name_, offset,
         fmt::format(format, std::forward<Args>(args)...));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
};

// What the metadata read so far costs in memory; charged before each
// allocation, so a file past the bound is refused before it is made.
struct MetadataBudget {
  uint64_t used = 0;
  std::string key;  // the entry being read, for the error

  void charge(const Cursor& c, size_t at, uint64_t count, uint64_t each) {
    if (count > (kMaxMetadataBytes - used) / each)
      c.error(at, "metadata '{}' would take the metadata past {} MiB of memory (the reader's bound)", key,
              kMaxMetadataBytes >> 20);
    used += count * each;
  }
};

// Smallest encoded size of one value of a type: used to refuse absurd counts
// before allocating for them.
size_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::STRING: case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::ARRAY: return 12;
    default: return 1;
  }
}

Value read_value(Cursor& c, ValueType type, int depth, MetadataBudget& budget) {
  Value v;
  v.type = type;
  switch (type) {
    case ValueType::UINT8: v.data = uint64_t{c.read<uint8_t>("u8 value")}; break;
    case ValueType::INT8: v.data = int64_t{c.read<int8_t>("i8 value")}; break;
    case ValueType::UINT16: v.data = uint64_t{c.read<uint16_t>("u16 value")}; break;
    case ValueType::INT16: v.data = int64_t{c.read<int16_t>("i16 value")}; break;
    case ValueType::UINT32: v.data = uint64_t{c.read<uint32_t>("u32 value")}; break;
    case ValueType::INT32: v.data = int64_t{c.read<int32_t>("i32 value")}; break;
    case ValueType::UINT64: v.data = c.read<uint64_t>("u64 value"); break;
    case ValueType::INT64: v.data = c.read<int64_t>("i64 value"); break;
    case ValueType::FLOAT32: v.data = double{c.read<float>("f32 value")}; break;
    case ValueType::FLOAT64: v.data = c.read<double>("f64 value"); break;
    case ValueType::BOOL: {
      size_t at = c.pos();
      uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1) c.error(at, "bool value is {}, not 0 or 1", b);
      v.data = b == 1;
      break;
    }
    case ValueType::STRING:
      // Bounded by the file's bytes anyway, but charged so the bound is exact.
      budget.charge(c, c.pos(), std::min<uint64_t>(c.peek_length(), c.remaining()), 1);
      v.data = c.read_string("string value");
      break;
    case ValueType::ARRAY: {
      size_t at = c.pos();
      if (depth >= kMaxArrayDepth) c.error(at, "arrays nested deeper than {}", kMaxArrayDepth);
      uint32_t raw_type = c.read<uint32_t>("array element type");
      if (raw_type >= static_cast<uint32_t>(ValueType::COUNT)) c.error(at, "unknown array element type {}", raw_type);
      auto element_type = static_cast<ValueType>(raw_type);
      uint64_t count = c.read<uint64_t>("array length");
      if (count > c.remaining() / min_encoded_size(element_type))
        c.error(at, "array of {} {} values cannot fit in the {} bytes that remain", count,
                value_type_name(element_type), c.remaining());
      // The Array and its shared_ptr control block, then every item.
      budget.charge(c, at, 1, sizeof(Array) + 32);
      budget.charge(c, at, count, sizeof(Value));
      auto array = std::make_shared<Array>();
      array->element_type = element_type;
      array->items.reserve(count);
      for (uint64_t i = 0; i < count; ++i) array->items.push_back(read_value(c, element_type, depth + 1, budget));
      v.data = std::move(array);
      break;
    }
    default:
      c.error(c.pos(), "unknown value type {}", static_cast<uint32_t>(type));
  }
  return v;
}

}  // namespace

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<File> File::open(const std::string& path) {
  auto map = std::make_unique<MappedFile>(path);
  std::unique_ptr<File> file(new File());
  file->base_ = map->data();
  file->size_ = map->size();
  file->name_ = path;
  file->map_ = std::move(map);
  file->parse_all();
  return file;
}

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<File> file(new File());
  file->base_ = data;
  file->size_ = size;
  file->name_ = name;
  file->parse_all();
  return file;
}

void File::parse_all() {
  Cursor c(base_, size_, name_);
  if (size_ < 4) c.error(0, "file is {} bytes, too short for a GGUF header", size_);
  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) c.error(0, "bad magic 0x{:08x} (expected \"GGUF\")", magic);
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    c.error(4, "unsupported GGUF version {} (this reader handles versions 2 and 3)", version_);
  size_t at = c.pos();
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each metadata entry takes at least 8+4+1 bytes, each tensor entry 8+4+8+4+8.
  if (n_kv > c.remaining() / 13) c.error(at + 8, "metadata count {} cannot fit in the file", n_kv);
  if (n_tensors > c.remaining() / 32) c.error(at, "tensor count {} cannot fit in the file", n_tensors);

  MetadataBudget budget;
  for (uint64_t i = 0; i < n_kv; ++i) {
    size_t key_at = c.pos();
    // The entry, its index node, and the key twice (entry and index).
    budget.key = "#" + std::to_string(i);
    budget.charge(c, key_at, 1, sizeof(metadata_[0]) + sizeof(*metadata_index_.begin()) + 32);
    budget.charge(c, key_at, std::min<uint64_t>(c.peek_length(), c.remaining()), 2);
    std::string key = c.read_string("metadata key");
    budget.key = key;
    uint32_t raw_type = c.read<uint32_t>("metadata value type");
    if (raw_type >= static_cast<uint32_t>(ValueType::COUNT))
      c.error(key_at, "metadata key '{}' has unknown value type {}", key, raw_type);
    Value value = read_value(c, static_cast<ValueType>(raw_type), 0, budget);
    if (metadata_index_.count(key)) c.error(key_at, "duplicate metadata key '{}'", key);
    metadata_index_[key] = metadata_.size();
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const Value* a = find("general.alignment")) {
    int64_t align = a->type == ValueType::UINT32 ? a->as_int("general.alignment") : 0;
    if (align <= 0 || (align & (align - 1)) != 0)
      fail("{}: invalid GGUF: general.alignment must be a u32 power of two, found {}", name_, a->to_display());
    alignment_ = static_cast<uint64_t>(align);
  }

  std::vector<size_t> info_offsets;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    size_t info_at = c.pos();
    info_offsets.push_back(info_at);
    TensorInfo t;
    t.name = c.read_string("tensor name");
    uint32_t n_dims = c.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      c.error(info_at, "tensor '{}' has {} dimensions (1 to {} allowed)", t.name, n_dims, kMaxDims);
    int64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = c.read<uint64_t>("tensor dimension");
      if (dim == 0 || dim > (1ull << 40)) c.error(info_at, "tensor '{}' has absurd dimension {}", t.name, dim);
      if (n > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(dim))
        c.error(info_at, "tensor '{}' element count overflows", t.name);
      n *= static_cast<int64_t>(dim);
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    size_t type_at = c.pos();
    uint32_t raw_type = c.read<uint32_t>("tensor type");
    const DTypeInfo* info = find_dtype(raw_type);
    if (!info || info->type == DType::Q8_K || info->type == DType::Q8_1)
      c.error(type_at, "tensor '{}' has unknown or unsupported type {}", t.name, raw_type);
    t.type = info->type;
    if (t.shape[0] % info->block_size != 0)
      c.error(info_at, "tensor '{}' ({}) has rows of {} values, not a multiple of the {} block size {}", t.name,
              info->name, t.shape[0], info->name, info->block_size);
    t.offset = c.read<uint64_t>("tensor data offset");
    if (t.offset % alignment_ != 0)
      c.error(info_at, "tensor '{}' data offset {} is not aligned to {}", t.name, t.offset, alignment_);
    t.bytes = static_cast<size_t>(n / info->block_size) * static_cast<size_t>(info->block_bytes);
    if (tensor_index_.count(t.name)) c.error(info_at, "duplicate tensor name '{}'", t.name);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next alignment boundary.
  uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_start > size_)
    c.error(c.pos(), "truncated: tensor data would start at {} past the end ({} bytes)", data_start, size_);
  uint64_t data_size = n_tensors > 0 ? size_ - data_start : 0;

  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  uint64_t prev_end = 0;
  const TensorInfo* prev = nullptr;
  for (size_t i : order) {
    TensorInfo& t = tensors_[i];
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      c.error(info_offsets[i], "tensor '{}' data [{}, {}) lies outside the {} bytes of tensor data (truncated file?)",
              t.name, data_start + t.offset, data_start + t.offset + t.bytes, data_size);
    if (prev && t.offset < prev_end)
      c.error(info_offsets[i], "tensor '{}' overlaps tensor '{}'", t.name, prev->name);
    prev_end = t.offset + t.bytes;
    prev = &t;
    t.data = base_ + data_start + t.offset;
  }
}

const Value* File::find(const std::string& key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

int64_t File::get_int(const std::string& key) const {
  const Value* v = find(key);
  if (!v) fail("{}: missing metadata key '{}'", name_, key);
  return v->as_int(key);
}
int64_t File::get_int(const std::string& key, int64_t fallback) const {
  const Value* v = find(key);
  return v ? v->as_int(key) : fallback;
}
double File::get_float(const std::string& key) const {
  const Value* v = find(key);
  if (!v) fail("{}: missing metadata key '{}'", name_, key);
  return v->as_float(key);
}
double File::get_float(const std::string& key, double fallback) const {
  const Value* v = find(key);
  return v ? v->as_float(key) : fallback;
}
bool File::get_bool(const std::string& key, bool fallback) const {
  const Value* v = find(key);
  return v ? v->as_bool(key) : fallback;
}
std::string File::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v) fail("{}: missing metadata key '{}'", name_, key);
  return v->as_string(key);
}
std::string File::get_string(const std::string& key, const std::string& fallback) const {
  const Value* v = find(key);
  return v ? v->as_string(key) : fallback;
}
const Array& File::get_array(const std::string& key) const {
  const Value* v = find(key);
  if (!v) fail("{}: missing metadata key '{}'", name_, key);
  return v->as_array(key);
}
std::vector<std::string> File::get_strings(const std::string& key) const {
  std::vector<std::string> out;
  for (const Value& item : get_array(key).items) out.push_back(item.as_string(key));
  return out;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(const std::string& name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("{}: missing tensor '{}'", name_, name);
  return *t;
}

}  // namespace shoal::gguf
