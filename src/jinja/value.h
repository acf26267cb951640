#pragma once
// A template's values, with Python's semantics as Jinja2 gives them: lists
// and dicts are shared (a namespace's list seen through two names is one
// list), dicts keep insertion order (tojson prints keys as the request sent
// them), and str() / repr() print as Python does ("True", "None",
// "['a', 'b']"), because templates print such values and the prompt must be
// byte-for-byte what Python's jinja2 renders.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shoal::jinja {

struct Value;
class Interpreter;
using List = std::vector<Value>;

// Keys are strings: templates index JSON objects and namespaces, whose keys are.
class Dict {
 public:
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value value);
  // A literal's keys that are not strings ({4096: 512}): looked up by their
  // text, iterated as what they are.
  void set(const Value& key, Value value);
  Value key(size_t index) const;

 private:
  std::vector<std::pair<size_t, std::shared_ptr<Value>>> typed_keys_;
};

// Arguments of a call: positional, then keyword.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index` or named `name`; nullptr when absent.
  const Value* get(size_t index, const char* name) const;
};

using Function = std::function<Value(Interpreter&, const Arguments&)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };
  Kind kind = Kind::Undefined;
  bool boolean = false;
  bool markup = false;  // a string marked safe (jinja2's Markup): `+` escapes a plain string joined to it
  int depth = 0;        // how deep lists and dicts nest inside (printing and freeing recurse through it)
  int64_t integer = 0;
  double number = 0;
  std::shared_ptr<const std::string> string;  // the string; for Undefined, the name that was missing
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // also a namespace's attributes
  std::shared_ptr<Function> function;

  static Value undefined(std::string name = {});
  static Value none();
  static Value from(bool b);
  static Value from(int64_t i);
  static Value from(double d);
  static Value from(std::string s);
  static Value from(List l);
  static Value from(Dict d);
  static Value namespace_of(Dict d);
  static Value from(Function f);
  // Throws RenderFault for JSON nested deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j, int depth = 0);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_list() const { return kind == Kind::List; }
  bool is_mapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }

  // The string (shared: copying a Value never copies its text).
  const std::string& text() const;

  bool truthy() const;
  double as_double() const;
  std::string type_name() const;  // Python's: 'str', 'int', 'dict', …
};

// Lists and dicts nest at most this deep: printing, tojson and freeing a
// value recurse through it, and a template could otherwise build a value a
// million levels deep (`{% set ns.x = [ns.x] %}` in a loop).
constexpr int kMaxValueDepth = 256;

// Before a list of `n` values is built from values already held (a copy, a
// repetition, a slice): its slots count against the render's memory and
// its elements as work (render_budget.h); fails when they would not fit.
void reserve_list(uint64_t n);

// Python's str() and repr() of a value; an Undefined prints as "".
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=…, separators=…, sort_keys=…) as
// Hugging Face's tojson calls it. indent < 0: none.
std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                    bool sort_keys);
nlohmann::ordered_json to_json_value(const Value& v);

// Python's == between two values (1 == 1.0 == True).
bool equal(const Value& a, const Value& b);
// Python's < for numbers, strings and lists; throws for other pairs.
bool less(const Value& a, const Value& b);

// Strings count code points, as Python's do.
std::vector<std::string> code_points(const std::string& s);
size_t code_point_count(const std::string& s);

}  // namespace shoal::jinja
