#pragma once
// JSON Schema → GBNF, for response_format json_schema / json_object and for
// the arguments of a forced tool call. The grammar writes JSON that
// validates against the schema:
//   type (one or a list), properties / required / additionalProperties,
//   items / prefixItems / minItems / maxItems, minLength / maxLength,
//   format date, time, date-time and uuid, pattern (anchored, the subset
//   of server/regex_grammar.h), an integer's minimum / maximum
//   / exclusiveMinimum / exclusiveMaximum (digit by digit), enum, const,
//   anyOf / oneOf, allOf (merged), $ref into #/$defs or #/definitions
//   (recursion allowed), and the annotations (title, description, …).
// Keywords the grammar cannot enforce (an unanchored pattern, a number's minimum, other
// formats …) are refused by name rather than ignored: a reply must not
// break its schema.
// Properties come in the schema's order (ordered_json keeps it); an object without `properties`
// takes any keys, one with `properties` only those (unless
// additionalProperties allows more).
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace shoal::server {

class JsonGrammarBuilder {
 public:
  // A rule for JSON that validates against `schema` (followed by optional
  // whitespace); `hint` names it. $refs resolve in `document` (the schema
  // they appear in; null: `schema` itself). Throws shoal::Error naming the
  // schema path of what it cannot do.
  std::string add_schema(const nlohmann::ordered_json& schema, const std::string& hint,
                         const nlohmann::ordered_json& document = nullptr);
  // Adds `name ::= body` (a name already taken gets a number).
  std::string add_rule(const std::string& name, const std::string& body);
  // Every rule, `root` first when there is one.
  std::string gbnf() const;

 private:
  std::string visit(const nlohmann::ordered_json& schema, const std::string& name, const std::string& path, int depth);
  std::string object_rule(const nlohmann::ordered_json& schema, const std::string& name, const std::string& path, int depth);
  std::string array_rule(const nlohmann::ordered_json& schema, const std::string& name, const std::string& path, int depth);
  std::string string_rule(const nlohmann::ordered_json& schema, const std::string& path);
  std::string typed(const std::string& type, const nlohmann::ordered_json& schema, const std::string& name,
                    const std::string& path, int depth);
  std::string integer_rule(const nlohmann::ordered_json& schema, const std::string& name, const std::string& path);
  std::string tuple_rule(const nlohmann::ordered_json& schema, const std::string& name, const std::string& path,
                         int depth);
  nlohmann::ordered_json merge_all_of(const nlohmann::ordered_json& schema, const std::string& path);
  const nlohmann::ordered_json& resolve_ref(const nlohmann::ordered_json& ref, const std::string& path) const;
  std::string primitive(const std::string& name);
  std::string fresh(const std::string& hint) const;

  nlohmann::ordered_json document_;
  std::map<std::string, std::string> refs_;  // "#/$defs/X" → its rule
  std::map<std::string, std::string> rules_;
  std::vector<std::string> order_;
};

// A GBNF string literal: "…" with the characters GBNF needs escaped.
std::string gbnf_literal(const std::string& text);
// A whole grammar whose root is `schema`.
std::string json_schema_gbnf(const nlohmann::ordered_json& schema);

}  // namespace shoal::server
