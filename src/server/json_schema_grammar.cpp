#include "server/json_schema_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "server/integer_range_grammar.h"
#include "server/regex_grammar.h"
#include "util/error.h"

namespace shoal::server {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;          // schemas inside schemas
constexpr size_t kMaxRules = 10000;    // rules one request may make
constexpr uint64_t kMaxLength = 10000; // minLength / maxLength / minItems / maxItems

// What the grammar enforces; the rest are annotations or refused below.
const std::set<std::string> kRefused = {
    "patternProperties", "multipleOf", "not", "if", "then", "else", "uniqueItems", "contains",
    "minContains", "maxContains", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedProperties", "unevaluatedItems", "contentEncoding",
    "contentMediaType"};
// Held for integers only (digit by digit, integer_range_grammar.h).
const char* const kBounds[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
// Keywords that only say what a schema is for: two allOf parts may differ in them.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$comment", "$id",
                                            "$schema", "deprecated", "readOnly", "writeOnly"};

// The formats a schema may name.
const std::set<std::string> kStringFormats = {"date", "time", "date-time", "uuid"};

// Whitespace between tokens, bounded so a model cannot pad forever (llama.cpp's rule).
constexpr const char* kSpace = R"(| " " | "\n"{1,2} [ \t]{0,20})";

const std::map<std::string, std::string> kPrimitives = {
    {"space", kSpace},
    {"boolean", R"(("true" | "false") space)"},
    {"null", R"("null" space)"},
    {"integral-part", R"([0] | [1-9] [0-9]{0,15})"},
    {"decimal-part", R"([0-9]{1,16})"},
    {"integer", R"(("-"? integral-part) space)"},
    {"number", R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space)"},
    {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
    {"string", R"("\"" char* "\"" space)"},
    {"value", R"(object | array | string | number | boolean | null)"},
    {"object", R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)"},
    {"array", R"("[" space ( value ("," space value)* )? "]" space)"},
    // String formats as llama.cpp's converter holds them, tightened so that every
    // string fits its format: days per month, 29 February in leap years only
    // (those ending 04, 08, …, 96: the centuries left out), years from 1000.
    // Rule names: "format-" and the format's name; parts of them too.
    {"format-date", "[1-9] [0-9]{3} \"-\" ( (\"0\" [13578] | \"1\" [02]) \"-\" (format-day-30 | \"31\") | "
                    "(\"0\" [469] | \"11\") \"-\" format-day-30 | \"02\" \"-\" format-day-28 ) | "
                    "[1-9] [0-9] ([02468] [48] | [2468] \"0\" | [13579] [26]) \"-02-29\""},
    {"format-time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
                    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
    {"format-date-time", "format-date \"T\" format-time"},
    {"format-uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                    "[0-9a-fA-F]{12}"},
    {"format-day-28", "\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]"},
    {"format-day-30", "format-day-28 | \"29\" | \"30\""},
};

// What each primitive uses, so adding one adds its parts.
const std::map<std::string, std::vector<std::string>> kUses = {
    {"boolean", {"space"}},
    {"null", {"space"}},
    {"integer", {"integral-part", "space"}},
    {"number", {"integral-part", "decimal-part", "space"}},
    {"string", {"char", "space"}},
    {"value", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", {"string", "value", "space"}},
    {"array", {"value", "space"}},
    {"format-date", {"format-day-28", "format-day-30"}},
    {"format-day-30", {"format-day-28"}},
    {"format-date-time", {"format-date", "format-time"}},
};

std::string sanitize(const std::string& hint) {
  std::string out;
  for (char c : hint) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '-';
  }
  if (out.empty()) return "schema";
  return out == "root" ? "schema-root" : out;
}

uint64_t count_of(const json& schema, const char* key, const std::string& path) {
  const auto it = schema.find(key);
  if (it == schema.end()) return 0;
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
    fail("{}.{}: expected a non-negative integer", path, key);
  const uint64_t n = it->get<uint64_t>();
  if (n > kMaxLength) fail("{}.{}: {} is more than the {} this server writes out", path, key, n, kMaxLength);
  return n;
}

// x repeated between min and max times (max 0 with `bounded` false: no upper bound).
std::string repeat(const std::string& x, uint64_t min, uint64_t max, bool bounded) {
  if (!bounded) return min == 0 ? x + "*" : fmt::format("{}{{{},}}", x, min);
  if (min == max) return fmt::format("{}{{{}}}", x, min);
  return fmt::format("{}{{{},{}}}", x, min, max);
}

}  // namespace

std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonGrammarBuilder::fresh(const std::string& hint) const {
  const std::string base = sanitize(hint);
  auto taken = [&](const std::string& n) { return rules_.count(n) || kPrimitives.count(n); };
  if (!taken(base)) return base;
  for (size_t i = 1;; ++i) {
    std::string name = fmt::format("{}-{}", base, i);
    if (!taken(name)) return name;
  }
}

std::string JsonGrammarBuilder::add_rule(const std::string& name, const std::string& body) {
  if (rules_.size() >= kMaxRules) fail("the schema needs more than {} grammar rules", kMaxRules);
  const std::string n = name == "root" && !rules_.count("root") ? name : fresh(name);
  rules_[n] = body;
  order_.push_back(n);
  return n;
}

std::string JsonGrammarBuilder::primitive(const std::string& name) {
  if (rules_.count(name)) return name;
  rules_[name] = kPrimitives.at(name);
  order_.push_back(name);
  if (const auto uses = kUses.find(name); uses != kUses.end()) {
    for (const std::string& u : uses->second) primitive(u);
  }
  return name;
}

std::string JsonGrammarBuilder::add_schema(const json& schema, const std::string& hint, const json& document) {
  document_ = document.is_null() ? schema : document;
  primitive("space");
  return visit(schema, hint, "schema", 0);
}

std::string JsonGrammarBuilder::visit(const json& schema, const std::string& name, const std::string& path, int depth) {
  if (depth > kMaxDepth) fail("{}: schemas nested more than {} deep", path, kMaxDepth);
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) fail("{}: the schema `false` allows nothing", path);
    return primitive("value");
  }
  if (!schema.is_object()) fail("{}: a schema must be an object or a boolean", path);
  for (const auto& [key, _] : schema.items()) {
    if (kRefused.count(key)) fail("{}: '{}' is not supported in a schema here (the output could not be held to it)", path, key);
  }
  if (const auto all = schema.find("allOf"); all != schema.end()) return visit(merge_all_of(schema, path), name, path, depth + 1);
  if (const auto ref = schema.find("$ref"); ref != schema.end()) {
    if (!ref->is_string()) fail("{}.$ref: expected a string", path);
    const std::string target = ref->get<std::string>();
    if (const auto known = refs_.find(target); known != refs_.end()) return known->second;
    std::string key;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (target.starts_with(prefix)) key = target.substr(std::string(prefix).size());
    }
    const json* defs = nullptr;
    if (!key.empty()) {
      const char* where = target.starts_with("#/$defs/") ? "$defs" : "definitions";
      if (document_.contains(where) && document_[where].is_object() && document_[where].contains(key))
        defs = &document_[where][key];
    }
    if (!defs) fail("{}.$ref: '{}' does not point into this schema's $defs or definitions", path, target);
    const std::string rule = add_rule(key, "");  // named first: a recursive $ref finds it
    refs_[target] = rule;
    const std::string body = visit(*defs, key, target, depth + 1);
    rules_[rule] = body;
    return rule;
  }
  auto alternatives = [&](const json& list, const char* key) {
    if (!list.is_array() || list.empty()) fail("{}.{}: expected a non-empty array", path, key);
    std::string body;
    for (size_t i = 0; i < list.size(); ++i) {
      if (i) body += " | ";
      body += visit(list[i], fmt::format("{}-{}", name, i), fmt::format("{}.{}[{}]", path, key, i), depth + 1);
    }
    return add_rule(name, body);
  };
  if (const auto c = schema.find("const"); c != schema.end()) return add_rule(name, gbnf_literal(c->dump()) + " space");
  if (const auto e = schema.find("enum"); e != schema.end()) {
    if (!e->is_array() || e->empty()) fail("{}.enum: expected a non-empty array", path);
    std::string body = "(";
    for (size_t i = 0; i < e->size(); ++i) body += (i ? " | " : "") + gbnf_literal((*e)[i].dump());
    return add_rule(name, body + ") space");
  }
  if (const auto a = schema.find("anyOf"); a != schema.end()) return alternatives(*a, "anyOf");
  // oneOf as anyOf: the grammar cannot rule out a reply that fits two.
  if (const auto a = schema.find("oneOf"); a != schema.end()) return alternatives(*a, "oneOf");
  const auto type = schema.find("type");
  if (type == schema.end()) {
    if (schema.contains("properties") || schema.contains("additionalProperties") || schema.contains("required"))
      return typed("object", schema, name, path, depth);
    if (schema.contains("items")) return typed("array", schema, name, path, depth);
    if (schema.contains("minLength") || schema.contains("maxLength") || schema.contains("format"))
      return typed("string", schema, name, path, depth);
    for (const char* bound : kBounds)
      if (schema.contains(bound)) fail("{}: '{}' is held for \"type\": \"integer\" only", path, bound);
    return primitive("value");
  }
  if (type->is_string()) return typed(type->get<std::string>(), schema, name, path, depth);
  if (!type->is_array() || type->empty()) fail("{}.type: expected a string or a non-empty array of them", path);
  std::string body;
  for (size_t i = 0; i < type->size(); ++i) {
    if (!(*type)[i].is_string()) fail("{}.type[{}]: expected a string", path, i);
    if (i) body += " | ";
    body += typed((*type)[i].get<std::string>(), schema, fmt::format("{}-{}", name, i), path, depth);
  }
  return add_rule(name, body);
}

std::string JsonGrammarBuilder::typed(const std::string& type, const json& schema, const std::string& name,
                                      const std::string& path, int depth) {
  if (type == "object") return object_rule(schema, name, path, depth);
  if (type == "array") return array_rule(schema, name, path, depth);
  if (type == "string") return string_rule(schema, path);
  if (type == "integer") return integer_rule(schema, name, path);
  if (type == "number")
    for (const char* bound : kBounds)
      if (schema.contains(bound)) fail("{}: '{}' is held for \"type\": \"integer\" only, not a number", path, bound);
  if (type == "number" || type == "boolean" || type == "null") return primitive(type);
  fail("{}.type: unknown type '{}'", path, type);
}

std::string JsonGrammarBuilder::string_rule(const json& schema, const std::string& path) {
  const bool has_min = schema.contains("minLength"), has_max = schema.contains("maxLength");
  if (const auto pattern = schema.find("pattern"); pattern != schema.end()) {
    if (!pattern->is_string()) fail("{}.pattern: expected a string", path);
    if (has_min || has_max || schema.contains("format"))
      fail("{}: 'pattern' with minLength, maxLength or format is not held here", path);
    std::string body;
    try {
      body = regex_gbnf(pattern->get<std::string>());
    } catch (const Error& e) {
      fail("{}: {}", path, e.what());
    }
    return add_rule("pattern-string", "\"\\\"\" (" + body + ") \"\\\"\" space");
  }
  if (const auto f = schema.find("format"); f != schema.end()) {
    if (!f->is_string()) fail("{}.format: expected a string", path);
    const std::string format = f->get<std::string>();
    if (!kStringFormats.count(format))
      fail("{}: 'format' {} is not held here (date, time, date-time and uuid are)", path, f->dump());
    if (has_min || has_max) fail("{}: 'format' with minLength or maxLength is not held here", path);
    return add_rule(format + "-string", "\"\\\"\" " + primitive("format-" + format) + " \"\\\"\" space");
  }
  if (!has_min && !has_max) return primitive("string");
  const uint64_t min = count_of(schema, "minLength", path);
  const uint64_t max = count_of(schema, "maxLength", path);
  if (has_max && max < min) fail("{}: maxLength {} is below minLength {}", path, max, min);
  primitive("char");
  return add_rule("string", "\"\\\"\" " + repeat("char", min, max, has_max) + " \"\\\"\" space");
}

std::string JsonGrammarBuilder::array_rule(const json& schema, const std::string& name, const std::string& path,
                                           int depth) {
  if (schema.contains("prefixItems")) return tuple_rule(schema, name, path, depth);
  const auto items = schema.find("items");
  const std::string item = items == schema.end() ? primitive("value")
                                                 : visit(*items, name + "-item", path + ".items", depth + 1);
  const bool has_max = schema.contains("maxItems");
  const uint64_t min = count_of(schema, "minItems", path);
  const uint64_t max = count_of(schema, "maxItems", path);
  if (has_max && max < min) fail("{}: maxItems {} is below minItems {}", path, max, min);
  // "[" then min..max items separated by commas.
  std::string list;
  if (has_max && max == 0) {
    list = "";
  } else if (min == 0) {
    const std::string more = repeat("(\",\" space " + item + ")", 0, has_max ? max - 1 : 0, has_max);
    list = "(" + item + " " + more + ")?";
  } else {
    const std::string more = repeat("(\",\" space " + item + ")", min - 1, has_max ? max - 1 : 0, has_max);
    list = item + " " + more;
  }
  return add_rule(name, "\"[\" space " + list + " \"]\" space");
}

// Properties in the schema's order, the required ones always there. With
// F(i) "the rest from property i, none written yet" and R(i) "the rest
// from property i, some written (so a comma first)":
//   F(i) = kv_i R(i+1) | F(i+1) [when optional]      R(i) = "," kv_i R(i+1) | R(i+1) [when optional]
// and at the end the additional properties, if allowed.
std::string JsonGrammarBuilder::object_rule(const json& schema, const std::string& name, const std::string& path,
                                            int depth) {
  const auto props = schema.find("properties");
  if (props != schema.end() && !props->is_object()) fail("{}.properties: expected an object", path);
  std::set<std::string> required;
  if (const auto req = schema.find("required"); req != schema.end()) {
    if (!req->is_array()) fail("{}.required: expected an array", path);
    for (const json& r : *req) {
      if (!r.is_string()) fail("{}.required: expected strings", path);
      required.insert(r.get<std::string>());
    }
  }
  const bool has_props = props != schema.end() && !props->empty();
  for (const std::string& r : required) {
    if (!has_props || !props->contains(r))
      fail("{}.required: '{}' is required but not among the properties", path, r);
  }
  // Extra keys: allowed by additionalProperties true or a schema; without
  // the keyword, only when no properties are listed (then any object goes).
  std::string extra;
  if (const auto add = schema.find("additionalProperties"); add != schema.end()) {
    if (add->is_object()) {
      extra = "string \":\" space " + visit(*add, name + "-additional", path + ".additionalProperties", depth + 1);
    } else if (add->is_boolean() && add->get<bool>()) {
      extra = "string \":\" space value";
    } else if (!add->is_boolean()) {
      fail("{}.additionalProperties: expected a boolean or a schema", path);
    }
  } else if (!has_props) {
    extra = "string \":\" space value";
  }
  if (!extra.empty()) {
    primitive("string");
    primitive("value");
  }
  std::vector<std::pair<std::string, bool>> kvs;  // rule body of "key": value, required
  if (has_props) {
    for (const auto& [key, sub] : props->items()) {
      const std::string value = visit(sub, name + "-" + key, path + ".properties." + key, depth + 1);
      kvs.emplace_back(gbnf_literal(json(key).dump()) + " space \":\" space " + value, required.count(key) != 0);
    }
  }
  const size_t n = kvs.size();
  // Built back to front: F(n), R(n) are the additional properties or nothing.
  std::string f_next = extra.empty() ? "" : "(" + extra + " (\",\" space " + extra + ")*)?";
  std::string r_next = extra.empty() ? "" : "(\",\" space " + extra + ")*";
  if (!f_next.empty()) f_next = add_rule(name + "-f" + std::to_string(n), f_next);
  if (!r_next.empty()) r_next = add_rule(name + "-r" + std::to_string(n), r_next);
  for (size_t i = n; i-- > 0;) {
    const auto& [kv, req] = kvs[i];
    std::string f = kv + (r_next.empty() ? "" : " " + r_next);
    std::string r = "\",\" space " + kv + (r_next.empty() ? "" : " " + r_next);
    if (!req) {
      f = f_next.empty() ? "(" + f + ")?" : f + " | " + f_next;
      r = r_next.empty() ? "(" + r + ")?" : r + " | " + r_next;
    }
    f_next = add_rule(name + "-f" + std::to_string(i), f);
    r_next = add_rule(name + "-r" + std::to_string(i), r);
  }
  return add_rule(name, "\"{\" space " + (f_next.empty() ? "" : f_next + " ") + "\"}\" space");
}

// minimum / maximum and the exclusive forms (a number, or draft 4's boolean
// beside minimum / maximum) as the integers they allow.
std::string JsonGrammarBuilder::integer_rule(const json& schema, const std::string& name, const std::string& path) {
  std::optional<int64_t> lo, hi;
  auto number = [&](const char* key) -> std::optional<double> {
    const auto it = schema.find(key);
    if (it == schema.end() || it->is_boolean()) return std::nullopt;
    if (!it->is_number()) fail("{}.{}: expected a number", path, key);
    const double v = it->get<double>();
    if (!std::isfinite(v) || std::fabs(v) > static_cast<double>(kMaxIntegerBound))
      fail("{}.{}: {} is past the bounds this server holds (±{})", path, key, it->dump(), kMaxIntegerBound);
    return v;
  };
  auto flag = [&](const char* key) {
    const auto it = schema.find(key);
    return it != schema.end() && it->is_boolean() && it->get<bool>();
  };
  auto raise_lo = [&](int64_t v) { lo = lo ? std::max(*lo, v) : v; };
  auto lower_hi = [&](int64_t v) { hi = hi ? std::min(*hi, v) : v; };
  if (const auto v = number("minimum"))
    raise_lo(flag("exclusiveMinimum") ? static_cast<int64_t>(std::floor(*v)) + 1 : static_cast<int64_t>(std::ceil(*v)));
  if (const auto v = number("maximum"))
    lower_hi(flag("exclusiveMaximum") ? static_cast<int64_t>(std::ceil(*v)) - 1 : static_cast<int64_t>(std::floor(*v)));
  if (const auto v = number("exclusiveMinimum")) raise_lo(static_cast<int64_t>(std::floor(*v)) + 1);
  if (const auto v = number("exclusiveMaximum")) lower_hi(static_cast<int64_t>(std::ceil(*v)) - 1);
  if (!lo && !hi) return primitive("integer");
  try {
    return add_rule(name, "(" + integer_range_gbnf(lo, hi) + ") space");
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

// prefixItems: the tuple's items in order, then `items` (a schema, or true)
// for any more, within minItems / maxItems.
std::string JsonGrammarBuilder::tuple_rule(const json& schema, const std::string& name, const std::string& path,
                                           int depth) {
  const json& prefix = schema.at("prefixItems");
  if (!prefix.is_array() || prefix.empty()) fail("{}.prefixItems: expected a non-empty array", path);
  const uint64_t n = prefix.size();
  const bool has_max = schema.contains("maxItems");
  const uint64_t min = count_of(schema, "minItems", path), max = count_of(schema, "maxItems", path);
  std::string more;
  if (const auto items = schema.find("items"); items != schema.end() && !(items->is_boolean() && !items->get<bool>()))
    more = visit(*items, name + "-item", path + ".items", depth + 1);
  if (min > n && more.empty()) fail("{}: minItems {} is more than the {} prefixItems with no items after", path, min, n);
  if (has_max && max < n) fail("{}: maxItems {} is fewer than the {} prefixItems", path, max, n);
  std::string body = "\"[\" space";
  for (uint64_t i = 0; i < n; ++i) {
    if (i) body += " \",\" space";
    body += " " + visit(prefix[i], fmt::format("{}-{}", name, i), fmt::format("{}.prefixItems[{}]", path, i), depth + 1);
  }
  if (!more.empty()) {
    const uint64_t extra_min = min > n ? min - n : 0;
    body += " " + repeat("(\",\" space " + more + ")", extra_min, has_max ? max - n : 0, has_max);
  }
  return add_rule(name, body + " \"]\" space");
}

// allOf as one schema: the parts' properties and required lists together,
// any other keyword the parts share only where they agree (a conflict is
// refused by name); a part that is a $ref is read where it points.
json JsonGrammarBuilder::merge_all_of(const json& schema, const std::string& path) {
  const json& parts = schema.at("allOf");
  if (!parts.is_array() || parts.empty()) fail("{}.allOf: expected a non-empty array", path);
  json merged = schema;
  merged.erase("allOf");
  auto merge = [&](const json& part, const std::string& where) {
    for (const auto& [key, value] : part.items()) {
      if (key == "properties") {
        if (!value.is_object()) fail("{}.properties: expected an object", where);
        json& props = merged["properties"];
        for (const auto& [p, sub] : value.items()) {
          if (props.contains(p) && props[p] != sub) fail("{}: property '{}' differs between allOf parts", path, p);
          props[p] = sub;
        }
      } else if (key == "required") {
        if (!value.is_array()) fail("{}.required: expected an array", where);
        json& req = merged["required"];
        if (!req.is_array()) req = json::array();
        for (const json& r : value)
          if (std::find(req.begin(), req.end(), r) == req.end()) req.push_back(r);
      } else if (!kAnnotations.count(key)) {
        if (merged.contains(key) && merged[key] != value) fail("{}: '{}' differs between allOf parts", path, key);
        merged[key] = value;
      }
    }
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string where = fmt::format("{}.allOf[{}]", path, i);
    const json* part = &parts[i];
    for (int hops = 0; part->is_object() && part->contains("$ref"); ++hops) {
      if (hops > kMaxDepth) fail("{}: $refs chained more than {} deep", where, kMaxDepth);
      part = &resolve_ref((*part)["$ref"], where);
    }
    if (!part->is_object()) fail("{}: expected a schema object", where);
    if (part->contains("allOf")) {
      merge(merge_all_of(*part, where), where);
    } else {
      merge(*part, where);
    }
  }
  return merged;
}

const json& JsonGrammarBuilder::resolve_ref(const json& ref, const std::string& path) const {
  if (!ref.is_string()) fail("{}.$ref: expected a string", path);
  const std::string target = ref.get<std::string>();
  for (const char* where : {"$defs", "definitions"}) {
    const std::string prefix = std::string("#/") + where + "/";
    if (!target.starts_with(prefix)) continue;
    const std::string key = target.substr(prefix.size());
    if (document_.contains(where) && document_[where].is_object() && document_[where].contains(key))
      return document_[where][key];
  }
  fail("{}.$ref: '{}' does not point into this schema's $defs or definitions", path, target);
}

std::string JsonGrammarBuilder::gbnf() const {
  std::string out;
  if (const auto root = rules_.find("root"); root != rules_.end()) out += "root ::= " + root->second + "\n";
  for (const std::string& name : order_) {
    if (name != "root") out += name + " ::= " + rules_.at(name) + "\n";
  }
  return out;
}

std::string json_schema_gbnf(const json& schema) {
  JsonGrammarBuilder b;
  const std::string top = b.add_schema(schema, "schema");
  b.add_rule("root", top);
  return b.gbnf();
}

}  // namespace shoal::server
