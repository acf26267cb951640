// jinja2's filters and tests, as their Python implementations behave, and
// Hugging Face's tojson (json.dumps, no HTML escaping, keys in order).
#include <algorithm>
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/render_budget.h"

namespace shoal::jinja {
namespace {

std::string lower(std::string s) {
  charge_work(s.size() / 256);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string upper(std::string s) {
  charge_work(s.size() / 256);
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// A dotted attribute path ("function.name") or an index, as jinja2's
// make_attrgetter reads it.
Value attribute_path(Interpreter& in, Value v, const Value& path) {
  if (path.kind == Value::Kind::Int) return get_item(in, v, path);
  std::string p = to_str(path);
  size_t start = 0;
  while (true) {
    size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = get_item(in, v, digits ? Value::from(static_cast<int64_t>(std::stoll(part))) : Value::from(part));
    if (dot == std::string::npos) return v;
    if (v.is_undefined()) return v;
    start = dot + 1;
  }
}

Arguments rest(const Arguments& a, size_t from) {
  Arguments r;
  for (size_t k = from; k < a.positional.size(); ++k) r.positional.push_back(a.positional[k]);
  r.keyword = a.keyword;
  return r;
}

// select / reject / selectattr / rejectattr.
Value select(Interpreter& in, const Value& input, const Arguments& a, bool by_attribute, bool keep) {
  size_t k = 0;
  Value attr;
  if (by_attribute) {
    const Value* at = a.get(k++, nullptr);
    if (!at) fault("selectattr/rejectattr needs an attribute");
    attr = *at;
  }
  const Value* test = a.get(k, nullptr);
  Arguments test_args = rest(a, k + 1);
  List out;
  if (!input.truthy()) return Value::from(std::move(out));  // jinja2: "if value:"
  for (const auto& item : iterate(input)) {
    in.step();
    Value v = by_attribute ? attribute_path(in, item, attr) : item;
    bool ok = test ? apply_test(in, to_str(*test), v, test_args) : v.truthy();
    if (ok == keep) out.push_back(item);
  }
  return Value::from(std::move(out));
}

std::string indent(const std::string& s, const Value* width, bool first, bool blank) {
  std::string pad(4, ' ');
  if (width && width->is_string()) {
    pad = width->text();
  } else if (width) {
    if (width->integer < 0) fault("indent width must not be negative");
    check_length(static_cast<uint64_t>(width->integer));
    pad.assign(static_cast<size_t>(width->integer), ' ');
  }
  // The pad is the template's to choose, once a line: the result is
  // checked as it grows, not once it is whole.
  std::string out = first ? pad : "";
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t end = std::min(s.find('\n', start), s.size());
    if (line > 0) {
      out += '\n';
      if (blank || end > start) out += pad;
    }
    out.append(s, start, end - start);
    check_length(out.size());
    if (end == s.size()) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((i & 4095) == 0) check_length(out.size());  // an entity is up to five times its character
    const char c = s[i];
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// printf-style "%s", "%d", "%%" for the format filter.
std::string percent_format(const std::string& f, const Arguments& a) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size()) {
      out += f[i];
      continue;
    }
    char spec = f[++i];
    if (spec == '%') {
      out += '%';
      continue;
    }
    const Value* v = a.get(next++, nullptr);
    if (!v) fault("not enough arguments for format string");
    if (spec == 'd' || spec == 'i') out += std::to_string(static_cast<int64_t>(v->as_double()));
    else out += to_str(*v);
    check_length(out.size());
  }
  return out;
}

bool sort_less(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) return lower(a.text()) < lower(b.text());
  return less(a, b);
}

}  // namespace

Value apply_named_filter(Interpreter& in, const std::string& name, const Value& v, const Arguments& a) {
  in.step();
  if (name == "tojson") {
    const Value* ind = a.get(0, "indent");
    const Value* seps = a.get(3, "separators");
    const Value* sort = a.get(4, "sort_keys");
    int indent_n = ind && ind->kind == Value::Kind::Int ? static_cast<int>(ind->integer) : -1;
    std::string item_sep = indent_n >= 0 ? "," : ", ", key_sep = ": ";
    if (seps && seps->is_list() && seps->list->size() == 2) {
      item_sep = to_str((*seps->list)[0]);
      key_sep = to_str((*seps->list)[1]);
    }
    if (v.is_undefined()) fault("Object of type Undefined is not JSON serializable");
    std::string out = to_json(v, indent_n, item_sep, key_sep, sort && sort->truthy());
    in.check_size(out.size());
    return Value::from(std::move(out));
  }
  if (name == "length" || name == "count") return Value::from(static_cast<int64_t>(length_of(v)));
  if (name == "string") return v.is_string() ? v : Value::from(to_str(v));
  if (name == "safe") {
    Value r = v.is_string() ? v : Value::from(to_str(v));
    r.markup = true;
    return r;
  }
  if (name == "trim") {
    Arguments m;
    if (const Value* chars = a.get(0, "chars")) m.positional.push_back(*chars);
    return in.call(get_attribute(in, Value::from(to_str(v)), "strip"), m);
  }
  if (name == "upper") return Value::from(upper(to_str(v)));
  if (name == "lower") return Value::from(lower(to_str(v)));
  if (name == "capitalize" || name == "title")
    return in.call(get_attribute(in, Value::from(to_str(v)), name), {});
  if (name == "replace") {
    return in.call(get_attribute(in, Value::from(to_str(v)), "replace"), a);
  }
  if (name == "default" || name == "d") {
    const Value* fallback = a.get(0, "default_value");
    const Value* boolean = a.get(1, "boolean");
    bool use = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
    return use ? (fallback ? *fallback : Value::from(std::string())) : v;
  }
  if (name == "join") {
    const Value* sep = a.get(0, "d");
    const Value* attr = a.get(1, "attribute");
    std::string s = sep ? to_str(*sep) : "", out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) out += s;
      first = false;
      out += to_str(attr ? attribute_path(in, item, *attr) : item);
      in.check_size(out.size());
    }
    return Value::from(std::move(out));
  }
  if (name == "list") return Value::from(iterate(v));
  if (name == "first" || name == "last") {
    List items = iterate(v);
    if (items.empty()) return Value::undefined("first");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = code_points(v.text());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::from(std::move(out));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::from(std::move(items));
  }
  if (name == "items" || name == "dictsort") {
    if (v.is_undefined()) return Value::from(List{});
    if (!v.is_mapping()) fault("{} filter expects a mapping, got {}", name, v.type_name());
    List out;
    for (size_t i = 0; i < v.dict->items.size(); ++i)
      out.push_back(Value::from(List{v.dict->key(i), v.dict->items[i].second}));
    if (name == "dictsort") {
      const Value* cs = a.get(0, "case_sensitive");
      const Value* by = a.get(1, "by");
      const Value* rev = a.get(2, "reverse");
      size_t pos = by && to_str(*by) == "value" ? 1 : 0;
      bool sensitive = cs && cs->truthy();
      std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
        return sort_less((*x.list)[pos], (*y.list)[pos], sensitive);
      });
      if (rev && rev->truthy()) std::reverse(out.begin(), out.end());
    }
    return Value::from(std::move(out));
  }
  if (name == "sort") {
    const Value* rev = a.get(0, "reverse");
    const Value* cs = a.get(1, "case_sensitive");
    const Value* attr = a.get(2, "attribute");
    List items = iterate(v);
    bool sensitive = cs && cs->truthy();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return attr ? sort_less(attribute_path(in, x, *attr), attribute_path(in, y, *attr), sensitive)
                  : sort_less(x, y, sensitive);
    });
    if (rev && rev->truthy()) std::reverse(items.begin(), items.end());
    return Value::from(std::move(items));
  }
  if (name == "unique") {
    const Value* cs = a.get(0, "case_sensitive");
    bool sensitive = cs && cs->truthy();
    List out;
    std::vector<Value> seen;
    for (const auto& item : iterate(v)) {
      Value key = (!sensitive && item.is_string()) ? Value::from(lower(item.text())) : item;
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::from(std::move(out));
  }
  if (name == "map") {
    const Value* attr = a.get(SIZE_MAX, "attribute");
    List out;
    if (!v.truthy()) return Value::from(std::move(out));  // jinja2: "if value:"
    for (const auto& item : iterate(v)) {
      in.step();
      if (attr) {
        Value x = attribute_path(in, item, *attr);
        const Value* dflt = a.get(SIZE_MAX, "default");
        out.push_back(x.is_undefined() && dflt ? *dflt : x);
      } else {
        const Value* filter = a.get(0, nullptr);
        if (!filter) fault("map() needs a filter name or attribute=");
        out.push_back(apply_named_filter(in, to_str(*filter), item, rest(a, 1)));
      }
    }
    return Value::from(std::move(out));
  }
  if (name == "select" || name == "reject") return select(in, v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select(in, v, a, true, name == "selectattr");
  if (name == "attr") {
    const Value* n = a.get(0, "name");
    if (!n) fault("attr() needs a name");
    return get_attribute(in, v, to_str(*n));
  }
  if (name == "indent") {
    const Value* first = a.get(1, "first");
    const Value* blank = a.get(2, "blank");
    std::string out = indent(to_str(v), a.get(0, "width"), first && first->truthy(), blank && blank->truthy());
    in.check_size(out.size());
    return Value::from(std::move(out));
  }
  if (name == "int") {
    const Value* dflt = a.get(0, "default");
    if (v.kind == Value::Kind::Int) return v;
    if (v.kind == Value::Kind::Bool) return Value::from(static_cast<int64_t>(v.boolean));
    if (v.kind == Value::Kind::Float) return Value::from(static_cast<int64_t>(v.number));
    if (v.is_string()) {
      try {
        size_t used = 0;
        double d = std::stod(v.text(), &used);
        return Value::from(static_cast<int64_t>(d));
      } catch (const std::exception&) {
      }
    }
    return dflt ? *dflt : Value::from(int64_t{0});
  }
  if (name == "float") {
    const Value* dflt = a.get(0, "default");
    if (v.is_number()) return Value::from(v.as_double());
    if (v.is_string()) {
      try {
        return Value::from(std::stod(v.text()));
      } catch (const std::exception&) {
      }
    }
    return dflt ? *dflt : Value::from(0.0);
  }
  if (name == "abs") {
    if (v.kind == Value::Kind::Int) return Value::from(v.integer < 0 ? -v.integer : v.integer);
    return Value::from(std::fabs(v.as_double()));
  }
  if (name == "round") {
    const Value* precision = a.get(0, "precision");
    double scale = std::pow(10.0, precision ? precision->as_double() : 0);
    return Value::from(std::round(v.as_double() * scale) / scale);
  }
  if (name == "min" || name == "max" || name == "sum") {
    List items = iterate(v);
    if (name == "sum") {
      Value total = Value::from(int64_t{0});
      for (const auto& x : items) total = binary_op(in, "+", total, x);
      return total;
    }
    if (items.empty()) return Value::undefined(name);
    Value best = items[0];
    for (const auto& x : items)
      if (name == "min" ? sort_less(x, best, false) : sort_less(best, x, false)) best = x;
    return best;
  }
  if (name == "escape" || name == "e") {
    Value r = v.markup ? v : Value::from(html_escape(to_str(v)));
    r.markup = true;
    return r;
  }
  if (name == "format") return Value::from(percent_format(to_str(v), a));
  if (name == "wordcount") {
    Arguments none;
    return Value::from(static_cast<int64_t>(length_of(in.call(get_attribute(in, Value::from(to_str(v)), "split"), none))));
  }
  fault("no filter named '{}'", name);
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, const Arguments& a) {
  in.step();
  auto arg = [&]() -> const Value& {
    const Value* x = a.get(0, nullptr);
    if (!x) fault("test '{}' needs an argument", name);
    return *x;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind == Value::Kind::Dict;
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Value::Kind::Int;
  if (name == "float") return v.kind == Value::Kind::Float;
  if (name == "boolean") return v.kind == Value::Kind::Bool;
  if (name == "true") return v.kind == Value::Kind::Bool && v.boolean;
  if (name == "false") return v.kind == Value::Kind::Bool && !v.boolean;
  if (name == "callable") return v.kind == Value::Kind::Function;
  if (name == "odd" || name == "even") {
    if (v.kind != Value::Kind::Int) fault("test '{}' needs an integer", name);
    return (((v.integer % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& d = arg();
    if (d.as_double() == 0) fault("integer division or modulo by zero");
    return std::fmod(v.as_double(), d.as_double()) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg());
  if (name == "sameas") return v.kind == arg().kind && equal(v, arg());
  if (name == "ne" || name == "!=") return !equal(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(arg(), v);
  if (name == "le" || name == "<=") return !less(arg(), v);
  if (name == "ge" || name == ">=") return !less(v, arg());
  if (name == "in") return binary_op(in, "in", v, arg()).boolean;
  if (name == "lower") return v.is_string() && lower(v.text()) == v.text();
  if (name == "upper") return v.is_string() && upper(v.text()) == v.text();
  if (name == "escaped") return false;
  fault("no test named '{}'", name);
}

}  // namespace shoal::jinja
