#pragma once
// What a template can call and test: jinja2's filters and tests, Python's
// str / dict methods that templates use, the operators' Python semantics, and
// the globals (range, namespace, dict, Hugging Face's raise_exception and
// strftime_now). Mutating methods (list.append, dict.pop, …) are refused, as
// Hugging Face's ImmutableSandboxedEnvironment refuses them.
#include <string>
#include <unordered_map>

#include "jinja/value.h"

namespace shoal::jinja {

class Interpreter;

std::unordered_map<std::string, Value> builtin_globals();

// obj.name: a dict's methods first, then its key, as jinja2's getattr does.
Value get_attribute(Interpreter& in, const Value& object, const std::string& name);
// obj[key]: the item first, then (a string key) the attribute.
Value get_item(Interpreter& in, const Value& object, const Value& key);
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// The items a for loop walks: a list's items, a dict's keys, a string's
// characters; nothing for Undefined.
List iterate(const Value& v);
size_t length_of(const Value& v);

// markupsafe's escape: & < > " ' as entities.
std::string html_escape(const std::string& s);

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);

Value apply_named_filter(Interpreter& in, const std::string& name, const Value& input, const Arguments& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& input, const Arguments& args);

}  // namespace shoal::jinja
