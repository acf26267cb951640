#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "jinja/error.h"
#include "jinja/render_budget.h"

namespace shoal::jinja {
namespace {

// A string, list or dict made during a render is counted against its
// budget while any copy of the value holds it (render_budget.h).
template <typename T>
std::shared_ptr<T> held(T object, uint64_t bytes) {
  struct Holder {
    T object;
    RenderBudget* budget;
    uint64_t bytes;
    Holder(T o, RenderBudget* b, uint64_t n) : object(std::move(o)), budget(b), bytes(n) {}
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;
    ~Holder() {
      if (budget) budget->release(bytes);
    }
  };
  RenderBudget* budget = RenderBudget::active();
  if (budget) budget->hold(bytes);
  auto holder = std::make_shared<Holder>(std::move(object), budget, budget ? bytes : 0);
  return std::shared_ptr<T>(holder, &holder->object);
}

// What a value's heap block costs beyond its contents (the control block,
// the holder).
constexpr uint64_t kBlockBytes = 64;

std::shared_ptr<const std::string> held_string(std::string s) {
  const uint64_t bytes = s.capacity() + kBlockBytes;
  return held<std::string>(std::move(s), bytes);
}

}  // namespace

const Value* Dict::find(const std::string& key) const {
  charge_work(items.size() / 16);  // a linear search: insertion order is kept, lookups are few
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value* Dict::find(const std::string& key) {
  charge_work(items.size() / 16);
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  if (Value* v = find(key)) *v = std::move(value);
  else items.emplace_back(key, std::move(value));
}

void Dict::set(const Value& key, Value value) {
  std::string text = to_str(key);
  bool existed = find(text) != nullptr;
  set(text, std::move(value));
  if (!existed && !key.is_string())
    typed_keys_.emplace_back(items.size() - 1, std::make_shared<Value>(key));
}

Value Dict::key(size_t index) const {
  for (const auto& [i, k] : typed_keys_)
    if (i == index) return *k;
  return Value::from(items[index].first);
}

const Value* Arguments::get(size_t index, const char* name) const {
  if (index < positional.size()) return &positional[index];
  if (name)
    for (const auto& [k, v] : keyword)
      if (k == name) return &v;
  return nullptr;
}

Value Value::undefined(std::string name) {
  Value v;
  if (!name.empty()) v.string = held_string(std::move(name));
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::from(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.boolean = b;
  return v;
}
Value Value::from(int64_t i) {
  Value v;
  v.kind = Kind::Int;
  v.integer = i;
  return v;
}
Value Value::from(double d) {
  Value v;
  v.kind = Kind::Float;
  v.number = d;
  return v;
}
Value Value::from(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.string = held_string(std::move(s));
  return v;
}
namespace {
int nested_depth(const Value& child, int deepest) {
  if (child.depth + 1 > kMaxValueDepth) fault("lists and dicts nested deeper than {}", kMaxValueDepth);
  return std::max(deepest, child.depth + 1);
}
}  // namespace

Value Value::from(List l) {
  Value v;
  v.kind = Kind::List;
  v.depth = 1;
  for (const Value& item : l) v.depth = nested_depth(item, v.depth);
  const uint64_t bytes = l.capacity() * sizeof(Value) + kBlockBytes;
  v.list = held<List>(std::move(l), bytes);
  return v;
}
Value Value::from(Dict d) {
  Value v;
  v.kind = Kind::Dict;
  v.depth = 1;
  for (const auto& [k, item] : d.items) v.depth = nested_depth(item, v.depth);
  uint64_t bytes = kBlockBytes;
  for (const auto& [k, item] : d.items) bytes += sizeof(std::pair<std::string, Value>) + k.capacity();
  v.dict = held<Dict>(std::move(d), bytes);
  return v;
}
Value Value::namespace_of(Dict d) {
  Value v = from(std::move(d));
  v.kind = Kind::Namespace;
  return v;
}
Value Value::from(Function f) {
  Value v;
  v.kind = Kind::Function;
  v.function = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fault("the template's variables nest deeper than {}", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return from(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return from(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return from(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return from(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return from(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e, depth + 1));
      return from(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.set(k, from_json(e, depth + 1));
      return from(std::move(d));
    }
    default: return none();
  }
}

void reserve_list(uint64_t n) {
  if (RenderBudget* b = RenderBudget::active()) {
    b->work(n);
    b->reserve(n > (uint64_t{1} << 40) ? UINT64_MAX : n * sizeof(Value));
  }
}

const std::string& Value::text() const {
  static const std::string empty;
  return string ? *string : empty;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return boolean;
    case Kind::Int: return integer != 0;
    case Kind::Float: return number != 0;
    case Kind::String: return !text().empty();
    case Kind::List: return !list->empty();
    case Kind::Dict: return !dict->items.empty();
    default: return true;
  }
}

double Value::as_double() const {
  switch (kind) {
    case Kind::Bool: return boolean ? 1 : 0;
    case Kind::Int: return static_cast<double>(integer);
    case Kind::Float: return number;
    default: fault("expected a number, got {}", type_name());
  }
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    default: return "function";
  }
}

namespace {

// Python's repr(float): the shortest digits that round-trip, positional
// between 1e-4 and 1e16, else with an exponent of at least two digits.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  size_t e = s.find('e');
  int exponent = std::stoi(s.substr(e + 1));
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int point = exponent + 1;  // digits before the decimal point
  std::string out;
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out = "0." + std::string(-point, '0') + digits;
    } else if (point >= static_cast<int>(digits.size())) {
      out = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return negative ? "-" + out : out;
}

std::string string_repr(const std::string& s) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((i & 4095) == 0) check_length(out.size());  // escapes may make it four times longer
    unsigned char c = s[i];
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0xa0) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i + 1]));  // C1 controls, NBSP
      ++i;
    } else out += static_cast<char>(c);
  }
  return out + quote;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    if ((i & 4095) == 0) check_length(out.size());  // escapes may make it six times longer
    const unsigned char c = s[i];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  const std::string& item_sep;
  const std::string& key_sep;
  bool sort_keys;
  std::string out;

  void newline(int depth) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * depth, ' ');
  }

  void write(const Value& v, int depth) {
    charge_work(1);
    check_length(out.size());
    switch (v.kind) {
      case Value::Kind::Undefined:
      case Value::Kind::None: out += "null"; break;
      case Value::Kind::Bool: out += v.boolean ? "true" : "false"; break;
      case Value::Kind::Int: out += std::to_string(v.integer); break;
      case Value::Kind::Float:
        if (std::isnan(v.number)) out += "NaN";
        else if (std::isinf(v.number)) out += v.number < 0 ? "-Infinity" : "Infinity";
        else out += float_repr(v.number);
        break;
      case Value::Kind::String: json_string(out, v.text()); break;
      case Value::Kind::List: {
        if (v.list->empty()) {
          out += "[]";
          break;
        }
        out += '[';
        for (size_t i = 0; i < v.list->size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(depth + 1);
          write((*v.list)[i], depth + 1);
        }
        if (indent >= 0) newline(depth);
        out += ']';
        break;
      }
      case Value::Kind::Dict: {
        if (v.dict->items.empty()) {
          out += "{}";
          break;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& item : v.dict->items) items.push_back(&item);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(depth + 1);
          json_string(out, items[i]->first);
          out += key_sep;
          write(items[i]->second, depth + 1);
        }
        if (indent >= 0) newline(depth);
        out += '}';
        break;
      }
      case Value::Kind::Namespace: fault("Object of type Namespace is not JSON serializable");
      default: fault("Object of type function is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::String: charge_work(v.text().size() / 256); return v.text();
    default: return to_repr(v);
  }
}

std::string to_repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.boolean ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.integer);
    case Value::Kind::Float: return float_repr(v.number);
    case Value::Kind::String: return string_repr(v.text());
    case Value::Kind::List: {
      std::string out = "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        out += (i ? ", " : "") + to_repr((*v.list)[i]);
        charge_work(1);
        check_length(out.size());
      }
      return out + "]";
    }
    case Value::Kind::Dict: {
      std::string out = "{";
      for (size_t i = 0; i < v.dict->items.size(); ++i) {
        out += (i ? ", " : "") + to_repr(v.dict->key(i)) + ": " + to_repr(v.dict->items[i].second);
        charge_work(1);
        check_length(out.size());
      }
      return out + "}";
    }
    case Value::Kind::Namespace: return "<Namespace>";
    default: return "<function>";
  }
}

std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                    bool sort_keys) {
  JsonWriter w{indent, item_sep, key_sep, sort_keys, {}};
  w.write(v, 0);
  return std::move(w.out);
}

nlohmann::ordered_json to_json_value(const Value& v) {
  return nlohmann::ordered_json::parse(to_json(v, -1, ",", ":", false));
}

bool equal(const Value& a, const Value& b) {
  charge_work(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float)
      return (a.kind == Value::Kind::Bool ? a.boolean : a.integer) ==
             (b.kind == Value::Kind::Bool ? b.boolean : b.integer);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: charge_work(a.text().size() / 256); return a.text() == b.text();
    case Value::Kind::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    default: return a.function == b.function;
  }
}

bool less(const Value& a, const Value& b) {
  charge_work(1);
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) {
    charge_work(std::min(a.text().size(), b.text().size()) / 256);
    return a.text() < b.text();
  }
  if (a.is_list() && b.is_list()) {
    for (size_t i = 0; i < a.list->size() && i < b.list->size(); ++i) {
      if (less((*a.list)[i], (*b.list)[i])) return true;
      if (less((*b.list)[i], (*a.list)[i])) return false;
    }
    return a.list->size() < b.list->size();
  }
  fault("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

std::vector<std::string> code_points(const std::string& s) {
  const size_t n = code_point_count(s);
  if (RenderBudget* b = RenderBudget::active()) {
    b->work(n);
    b->reserve(static_cast<uint64_t>(n) * sizeof(std::string));
  }
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    unsigned char c = s[i];
    if (c >= 0xf0) n = 4;
    else if (c >= 0xe0) n = 3;
    else if (c >= 0xc0) n = 2;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t code_point_count(const std::string& s) {
  charge_work(s.size() / 256);
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

}  // namespace shoal::jinja
