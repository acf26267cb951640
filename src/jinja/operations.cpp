// Attributes, items, slices, operators, Python's str and dict methods, and
// the globals: the parts of Python a template reaches through jinja2.
#include <string.h>  // memmem

#include <algorithm>
#include <cmath>
#include <ctime>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"

namespace shoal::jinja {
namespace {

// Reading a string's bytes is work in proportion (render_budget.h).
void touch(const std::string& s) { charge_work(s.size() / 256); }

// Where `needle` first occurs in `hay` at or after `from` (npos: nowhere).
// glibc's memmem is linear in both lengths (two-way), where
// std::string::find may take their product: a template chooses both.
size_t find_text(const std::string& hay, const std::string& needle, size_t from = 0) {
  if (from > hay.size()) return std::string::npos;
  charge_work((hay.size() - from + needle.size()) / 256);
  const void* at = memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
  return at ? static_cast<size_t>(static_cast<const char*>(at) - hay.data()) : std::string::npos;
}

// The last occurrence: the first of the reversed needle in the reversed hay.
size_t rfind_text(const std::string& hay, const std::string& needle) {
  if (needle.size() > hay.size()) return std::string::npos;
  reserve_bytes(hay.size() + needle.size());
  const std::string rhay(hay.rbegin(), hay.rend()), rneedle(needle.rbegin(), needle.rend());
  const size_t p = find_text(rhay, rneedle);
  return p == std::string::npos ? p : hay.size() - p - needle.size();
}

bool is_py_space(const std::string& c) { return c.size() == 1 && std::string(" \t\n\r\f\v").find(c[0]) != std::string::npos; }

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::string> cps = code_points(s);
  std::vector<std::string> set;
  bool whitespace = !chars || chars->is_none() || chars->is_undefined();
  if (!whitespace) {
    set = code_points(to_str(*chars));
    std::sort(set.begin(), set.end());
  }
  auto strip_it = [&](const std::string& c) {
    return whitespace ? is_py_space(c) : std::binary_search(set.begin(), set.end(), c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

Value split(const std::string& s, const Value* sep, const Value* maxsplit) {
  int64_t limit = maxsplit && maxsplit->kind == Value::Kind::Int ? maxsplit->integer : -1;
  List parts;
  if (!sep || sep->is_none()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (true) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (limit >= 0 && static_cast<int64_t>(parts.size()) == limit) {
        size_t e = s.size();
        while (e > i && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
        parts.push_back(Value::from(s.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      parts.push_back(Value::from(s.substr(i, j - i)));
      i = j;
    }
    return Value::from(std::move(parts));
  }
  std::string d = to_str(*sep);
  if (d.empty()) fault("empty separator");
  size_t start = 0;
  while (true) {
    size_t p = find_text(s, d, start);
    if (p == std::string::npos || (limit >= 0 && static_cast<int64_t>(parts.size()) == limit)) {
      parts.push_back(Value::from(s.substr(start)));
      break;
    }
    parts.push_back(Value::from(s.substr(start, p - start)));
    start = p + d.size();
  }
  return Value::from(std::move(parts));
}

std::string replace_all(Interpreter& in, const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character and at both ends.
    std::vector<std::string> cps = code_points(s);
    int64_t done = 0;
    for (const auto& c : cps) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += c;
      in.check_size(out.size());
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = find_text(s, from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    in.check_size(out.size());
    start = p + from.size();
    ++done;
  }
  out.append(s, start);
  return out;
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.is_list()) {
    for (const auto& p : *what.list)
      if (one(to_str(p))) return true;
    return false;
  }
  if (!what.is_string()) fault("startswith/endswith takes a string or a tuple of strings");
  return one(what.text());
}

std::string title_case(const std::string& s) {
  touch(s);
  std::string out;
  bool prev_cased = false;
  for (char ch : s) {
    unsigned char c = ch;
    bool alpha = std::isalpha(c);
    out += static_cast<char>(alpha ? (prev_cased ? std::tolower(c) : std::toupper(c)) : c);
    prev_cased = alpha;
  }
  return out;
}

// str.format: {} and {0} and {name}, with no format specs.
std::string format_string(const std::string& s, const Arguments& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (s[i] == '{') {
      size_t e = s.find('}', i);
      if (e == std::string::npos) fault("Single '{{' encountered in format string");
      std::string field = s.substr(i + 1, e - i - 1);
      const Value* v = nullptr;
      if (field.empty()) v = a.get(auto_index++, nullptr);
      else if (std::all_of(field.begin(), field.end(), ::isdigit)) v = a.get(std::stoul(field), nullptr);
      else v = a.get(SIZE_MAX, field.c_str());
      if (!v) fault("format: no argument for '{{{}}}'", field);
      out += to_str(*v);
      check_length(out.size());
      i = e;
    } else {
      out += s[i];
    }
  }
  return out;
}

Value bound(Function f) { return Value::from(std::move(f)); }

// A method of a string: the closure keeps the value (shared), never a copy
// of its text.
Value string_method(Interpreter& in, const Value& self, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return bound([self, left, right](Interpreter&, const Arguments& a) {
      const std::string& s = self.text();
      return Value::from(strip(s, a.get(0, "chars"), left, right));
    });
  }
  if (name == "split")
    return bound([self](Interpreter&, const Arguments& a) {
      const std::string& s = self.text();
      touch(s);
      return split(s, a.get(0, "sep"), a.get(1, "maxsplit")); });
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return bound([self, start](Interpreter&, const Arguments& a) {
      const std::string& s = self.text();
      touch(s);
      const Value* p = a.get(0, "prefix");
      if (!p) fault("startswith/endswith needs an argument");
      return Value::from(starts_or_ends(s, *p, start));
    });
  }
  if (name == "upper" || name == "lower") {
    bool up = name == "upper";
    return bound([self, up](Interpreter&, const Arguments&) {
      const std::string& s = self.text();
      touch(s);
      std::string r = s;
      for (auto& c : r) c = static_cast<char>(up ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
      return Value::from(std::move(r));
    });
  }
  if (name == "title")
    return bound([self](Interpreter&, const Arguments&) {
      const std::string& s = self.text();
      touch(s);
      return Value::from(title_case(s)); });
  if (name == "capitalize")
    return bound([self](Interpreter&, const Arguments&) {
      const std::string& s = self.text();
      touch(s);
      std::string r = s;
      for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!r.empty()) r[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(r[0])));
      return Value::from(std::move(r));
    });
  if (name == "replace")
    return bound([self](Interpreter& in2, const Arguments& a) {
      const std::string& s = self.text();
      touch(s);
      const Value* from = a.get(0, "old");
      const Value* to = a.get(1, "new");
      const Value* count = a.get(2, "count");
      if (!from || !to) fault("replace() needs two arguments");
      return Value::from(replace_all(in2, s, to_str(*from), to_str(*to), count ? count->integer : -1));
    });
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return bound([self, name](Interpreter&, const Arguments& a) {
      const std::string& s = self.text();
      touch(s);
      const Value* sub = a.get(0, "sub");
      if (!sub) fault("{}() needs an argument", name);
      std::string t = to_str(*sub);
      if (name == "count") {
        if (t.empty()) return Value::from(static_cast<int64_t>(code_point_count(s) + 1));
        int64_t n = 0;
        for (size_t p = find_text(s, t); p != std::string::npos; p = find_text(s, t, p + t.size())) ++n;
        return Value::from(n);
      }
      size_t p = name == "rfind" ? rfind_text(s, t) : find_text(s, t);
      if (p == std::string::npos) {
        if (name == "index") fault("substring not found");
        return Value::from(int64_t{-1});
      }
      return Value::from(static_cast<int64_t>(code_point_count(s.substr(0, p))));
    });
  }
  if (name == "format")
    return bound([self](Interpreter&, const Arguments& a) {
      const std::string& s = self.text();
      touch(s);
      return Value::from(format_string(s, a)); });
  if (name == "join")
    return bound([self](Interpreter& in2, const Arguments& a) {
      const std::string& s = self.text();
      touch(s);
      const Value* items = a.get(0, "iterable");
      if (!items) fault("join() needs an argument");
      std::string out;
      bool first = true;
      for (const auto& v : iterate(*items)) {
        if (!first) out += s;
        first = false;
        if (!v.is_string()) fault("sequence item: expected str instance, {} found", v.type_name());
        out += v.text();
        in2.check_size(out.size());
      }
      return Value::from(std::move(out));
    });
  if (name == "splitlines")
    return bound([self](Interpreter&, const Arguments&) {
      const std::string& s = self.text();
      touch(s);
      List lines;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          lines.push_back(Value::from(s.substr(start, i - start)));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) lines.push_back(Value::from(s.substr(start)));
      return Value::from(std::move(lines));
    });
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    return bound([self, name](Interpreter&, const Arguments&) {
      const std::string& s = self.text();
      touch(s);
      if (s.empty()) return Value::from(false);
      for (unsigned char c : s) {
        bool ok = name == "isdigit" ? std::isdigit(c) : name == "isalpha" ? std::isalpha(c)
                  : name == "isspace" ? std::isspace(c) : std::isalnum(c);
        if (!ok) return Value::from(false);
      }
      return Value::from(true);
    });
  }
  (void)in;
  return Value::undefined(name);
}

const char* kMutators[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
                           "update", "setdefault", "popitem", "add", "discard"};

}  // namespace

Value get_attribute(Interpreter& in, const Value& object, const std::string& name) {
  switch (object.kind) {
    case Value::Kind::Undefined:
      fault("'{}' is undefined", object.text().empty() ? name : object.text());
    case Value::Kind::String: return string_method(in, object, name);
    case Value::Kind::Namespace: {
      const Value* v = object.dict->find(name);
      return v ? *v : Value::undefined(name);
    }
    case Value::Kind::Dict: {
      Value d = object;
      if (name == "items" || name == "keys" || name == "values")
        return bound([d, name](Interpreter&, const Arguments&) {
          List out;
          for (size_t i = 0; i < d.dict->items.size(); ++i) {
            const Value& v = d.dict->items[i].second;
            if (name == "items") out.push_back(Value::from(List{d.dict->key(i), v}));
            else out.push_back(name == "keys" ? d.dict->key(i) : v);
          }
          return Value::from(std::move(out));
        });
      if (name == "get")
        return bound([d](Interpreter&, const Arguments& a) {
          const Value* key = a.get(0, "key");
          if (!key) fault("get() needs a key");
          const Value* v = d.dict->find(to_str(*key));
          if (v) return *v;
          const Value* fallback = a.get(1, "default");
          return fallback ? *fallback : Value::none();
        });
      for (const char* m : kMutators)
        if (name == m) fault("access to attribute '{}' of 'dict' object is unsafe", name);
      const Value* v = object.dict->find(name);
      return v ? *v : Value::undefined(name);
    }
    case Value::Kind::List:
      for (const char* m : kMutators)
        if (name == m) fault("access to attribute '{}' of 'list' object is unsafe", name);
      return Value::undefined(name);
    default: return Value::undefined(name);
  }
}

Value get_item(Interpreter& in, const Value& object, const Value& key) {
  switch (object.kind) {
    case Value::Kind::Undefined: fault("'{}' is undefined", object.text());
    case Value::Kind::List:
      if (key.kind == Value::Kind::Int) {
        int64_t n = static_cast<int64_t>(object.list->size()), i = key.integer < 0 ? key.integer + n : key.integer;
        if (i >= 0 && i < n) return (*object.list)[static_cast<size_t>(i)];
      }
      return Value::undefined();
    case Value::Kind::String:
      if (key.kind == Value::Kind::Int) {
        auto cps = code_points(object.text());
        int64_t n = static_cast<int64_t>(cps.size()), i = key.integer < 0 ? key.integer + n : key.integer;
        if (i >= 0 && i < n) return Value::from(cps[static_cast<size_t>(i)]);
        return Value::undefined();
      }
      break;
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      if (const Value* v = object.dict->find(to_str(key))) return *v;
      break;
    }
    default: break;
  }
  if (key.is_string()) return get_attribute(in, object, key.text());
  return Value::undefined();
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  int64_t st = step.is_none() ? 1 : step.integer;
  if (st == 0) fault("slice step cannot be zero");
  static const List kNoItems;
  const List& items = object.is_list() ? *object.list : kNoItems;
  std::vector<std::string> cps;
  if (object.is_list()) reserve_list(items.size());
  else if (object.is_string()) cps = code_points(object.text());
  else fault("'{}' object is not subscriptable", object.type_name());
  int64_t n = static_cast<int64_t>(object.is_list() ? items.size() : cps.size());
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = v.integer;
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  List out;
  std::string text;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (object.is_list()) out.push_back(items[static_cast<size_t>(i)]);
    else text += cps[static_cast<size_t>(i)];
  }
  return object.is_list() ? Value::from(std::move(out)) : Value::from(std::move(text));
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: reserve_list(v.list->size()); return *v.list;
    case Value::Kind::Dict: {
      reserve_list(v.dict->items.size());
      List keys;
      for (size_t i = 0; i < v.dict->items.size(); ++i) keys.push_back(v.dict->key(i));
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      for (auto& c : code_points(v.text())) chars.push_back(Value::from(std::move(c)));
      return chars;
    }
    default: fault("'{}' object is not iterable", v.type_name());
  }
}

size_t length_of(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return code_point_count(v.text());
    case Value::Kind::List: return v.list->size();
    case Value::Kind::Dict:
    case Value::Kind::Namespace: return v.dict->items.size();
    default: fault("object of type '{}' has no len()", v.type_name());
  }
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a);
    const std::string t = to_str(b);
    in.check_size(s.size() + t.size());
    s += t;
    return Value::from(std::move(s));
  }
  if (op == "==") return Value::from(equal(a, b));
  if (op == "!=") return Value::from(!equal(a, b));
  if (op == "<") return Value::from(less(a, b));
  if (op == ">") return Value::from(less(b, a));
  if (op == "<=") return Value::from(!less(b, a));
  if (op == ">=") return Value::from(!less(a, b));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) fault("'in <string>' requires string as left operand, not {}", a.type_name());
      found = find_text(b.text(), a.text()) != std::string::npos;
    } else if (b.is_mapping()) {
      found = a.is_string() && b.dict->find(a.text());
    } else if (b.is_list()) {
      for (const auto& item : *b.list)  // equal() counts each comparison as work
        if (equal(item, a)) {
          found = true;
          break;
        }
    } else if (!b.is_undefined()) {
      fault("argument of type '{}' is not iterable", b.type_name());
    }
    return Value::from(op == "in" ? found : !found);
  }
  if (a.is_undefined() || b.is_undefined())
    fault("'{}' is undefined", a.is_undefined() ? a.text() : b.text());
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      in.check_size(a.text().size() + b.text().size());
      if (a.markup == b.markup) {
        Value r = Value::from(a.text() + b.text());
        r.markup = a.markup;
        return r;
      }
      // Markup + str escapes the plain side (markupsafe), as Python's jinja2 does.
      Value r = Value::from(a.markup ? a.text() + html_escape(b.text()) : html_escape(a.text()) + b.text());
      r.markup = true;
      return r;
    }
    if (a.is_list() && b.is_list()) {
      reserve_list(a.list->size() + b.list->size());
      List out;
      out.reserve(a.list->size() + b.list->size());
      out.insert(out.end(), a.list->begin(), a.list->end());
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::from(std::move(out));
    }
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    const Value& seq = (a.is_string() || a.is_list()) ? a : b;
    const Value& times = &seq == &a ? b : a;
    if (times.kind != Value::Kind::Int && times.kind != Value::Kind::Bool)
      fault("can't multiply sequence by non-int of type '{}'", times.type_name());
    const uint64_t n = static_cast<uint64_t>(
        std::max<int64_t>(0, times.kind == Value::Kind::Bool ? times.boolean : times.integer));
    // The result's size is known before it is built: a string within the
    // longest a template may make, a list's slots within its memory (the
    // items are the same values, shared, not copies).
    const uint64_t unit = seq.is_string() ? seq.text().size() : seq.list->size();
    // Nothing repeated any number of times is nothing, at once ('' * 10**18
    // would otherwise loop 10**18 times making it).
    if (unit == 0 || n == 0) return seq.is_string() ? Value::from(std::string()) : Value::from(List{});
    if (n > (uint64_t{1} << 40) / unit) in.check_size(SIZE_MAX);
    if (seq.is_string()) {
      in.check_size(n * unit);
      reserve_bytes(n * unit);
      std::string out;
      out.reserve(n * unit);
      for (uint64_t i = 0; i < n; ++i) out += seq.text();
      return Value::from(std::move(out));
    }
    reserve_list(n * unit);
    List out;
    out.reserve(n * unit);
    for (uint64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list->begin(), seq.list->end());
    return Value::from(std::move(out));
  }
  if (!a.is_number() || !b.is_number())
    fault("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
  bool ints = a.kind != Value::Kind::Float && b.kind != Value::Kind::Float;
  auto as_int = [](const Value& v) { return v.kind == Value::Kind::Bool ? int64_t{v.boolean} : v.integer; };
  if (ints && op != "/" && !(op == "**" && as_int(b) < 0)) {
    int64_t x = as_int(a), y = as_int(b);
    // Python's integers do not overflow; these do, so past 64 bits is an
    // error rather than a wrapped (or, for INT64_MIN // -1, trapping) result.
    int64_t r = 0;
    auto checked = [&](bool overflowed) {
      if (overflowed) fault("integer {} overflows 64 bits", op);
      return Value::from(r);
    };
    if (op == "+") return checked(__builtin_add_overflow(x, y, &r));
    if (op == "-") return checked(__builtin_sub_overflow(x, y, &r));
    if (op == "*") return checked(__builtin_mul_overflow(x, y, &r));
    if (op == "//" || op == "%") {
      if (y == 0) fault("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) {
        if (op == "%") return Value::from(int64_t{0});
        fault("integer // overflows 64 bits");
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::from(op == "//" ? q : m);
    }
    if (op == "**") {
      // 0, 1 and -1 to any power stay small; any other base overflows
      // within 63 multiplications, so the loop is short.
      if (x == 0 || x == 1) return Value::from(y == 0 ? int64_t{1} : x);
      if (x == -1) return Value::from(y % 2 ? int64_t{-1} : int64_t{1});
      r = 1;
      for (int64_t i = 0; i < y; ++i)
        if (__builtin_mul_overflow(r, x, &r)) fault("integer ** overflows 64 bits");
      return Value::from(r);
    }
  }
  double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::from(x + y);
  if (op == "-") return Value::from(x - y);
  if (op == "*") return Value::from(x * y);
  if (op == "**") return Value::from(std::pow(x, y));
  if (y == 0) fault("float division by zero");
  if (op == "/") return Value::from(x / y);
  if (op == "//") return Value::from(std::floor(x / y));
  if (op == "%") return Value::from(x - std::floor(x / y) * y);
  fault("unknown operator '{}'", op);
}

std::unordered_map<std::string, Value> builtin_globals() {
  std::unordered_map<std::string, Value> g;
  g["range"] = Value::from(Function([](Interpreter& in, const Arguments& a) {
    int64_t start = 0, stop = 0, step = 1;
    auto arg = [&](size_t k) {
      const Value* v = a.get(k, nullptr);
      if (!v || (v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool))
        fault("range() takes integers");
      return v->integer;
    };
    if (a.positional.size() == 1) stop = arg(0);
    else if (a.positional.size() >= 2) {
      start = arg(0);
      stop = arg(1);
      if (a.positional.size() == 3) step = arg(2);
    } else fault("range() takes 1 to 3 arguments");
    if (step == 0) fault("range() arg 3 must not be zero");
    // How many items, in 128 bits: stop - start may not fit in 64.
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 stride = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
    const __int128 count = span > 0 ? (span + stride - 1) / stride : 0;
    if (count > static_cast<__int128>(in.limits().max_range))
      fault("range() over {} items: the template was stopped", in.limits().max_range);
    reserve_list(static_cast<uint64_t>(count));
    List out;
    out.reserve(static_cast<size_t>(count));
    for (__int128 k = 0; k < count; ++k) out.push_back(Value::from(static_cast<int64_t>(start + k * step)));
    return Value::from(std::move(out));
  }));
  g["dict"] = Value::from(Function([](Interpreter&, const Arguments& a) {
    Dict d;
    if (const Value* init = a.get(0, nullptr); init && init->is_mapping()) d = *init->dict;
    for (const auto& [k, v] : a.keyword) d.set(k, v);
    return Value::from(std::move(d));
  }));
  g["namespace"] = Value::from(Function([](Interpreter& in, const Arguments& a) {
    Dict d;
    if (const Value* init = a.get(0, nullptr); init && init->is_mapping()) d = *init->dict;
    for (const auto& [k, v] : a.keyword) d.set(k, v);
    Value ns = Value::namespace_of(std::move(d));
    in.adopt_namespace(ns);
    return ns;
  }));
  g["raise_exception"] = Value::from(Function([](Interpreter&, const Arguments& a) -> Value {
    const Value* m = a.get(0, "message");
    fault("the template raised: {}", m ? to_str(*m) : std::string("(no message)"));
  }));
  g["strftime_now"] = Value::from(Function([](Interpreter&, const Arguments& a) {
    const Value* f = a.get(0, "format");
    if (!f || !f->is_string()) fault("strftime_now() needs a format string");
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    size_t n = std::strftime(buf, sizeof buf, f->text().c_str(), &local);
    return Value::from(std::string(buf, n));
  }));
  return g;
}

}  // namespace shoal::jinja
