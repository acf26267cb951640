// JSON Schema → GBNF: JSON that validates is a whole match of the grammar,
// JSON that does not is refused, and what cannot be enforced is refused
// by name.
#include "server/json_schema_grammar.h"

#include <gtest/gtest.h>

#include "grammar/gbnf_parser.h"
#include "grammar/grammar_matcher.h"
#include "util/error.h"

namespace shoal::server {
namespace {

using ojson = nlohmann::ordered_json;

bool fits(const ojson& schema, const std::string& text) {
  grammar::GrammarMatcher m(std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(json_schema_gbnf(schema))));
  return m.accept(text) && m.accepting();
}

const ojson kPerson = ojson::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "email": {"type": ["string", "null"]},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
    "home": {"$ref": "#/$defs/place"}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"place": {"type": "object", "properties": {"city": {"const": "Paris"},
                                                      "near": {"anyOf": [{"$ref": "#/$defs/place"}, {"type": "null"}]}},
                      "required": ["city"]}}
})");

TEST(JsonSchemaGrammar, ValidJsonMatches) {
  EXPECT_TRUE(fits(kPerson, R"({"name": "Ann", "age": 41})"));
  EXPECT_TRUE(fits(kPerson, "{\n  \"name\": \"Bo\",\n  \"age\": -3,\n  \"email\": null,\n  \"tags\": [\"a\", 3]\n}"));
  EXPECT_TRUE(fits(kPerson, R"({"name":"C","age":0,"home":{"city":"Paris","near":{"city":"Paris","near":null}}})"));
  EXPECT_TRUE(fits(kPerson, R"({"name": "D", "age": 1, "tags": ["b"]})"));  // an optional one skipped
  EXPECT_TRUE(fits(ojson::parse(R"({"type": "number"})"), "-12.5e+3"));
  EXPECT_TRUE(fits(ojson::parse(R"({"type": "object"})"), R"({"any": [1, {"x": "\u00e9"}]})"));
  EXPECT_TRUE(fits(ojson(true), "[true, false, null]"));
}

TEST(JsonSchemaGrammar, InvalidJsonIsRefused) {
  EXPECT_FALSE(fits(kPerson, R"({"age": 41, "name": "Ann"})"));       // out of the schema's order
  EXPECT_FALSE(fits(kPerson, R"({"name": "Ann"})"));                  // a required one missing
  EXPECT_FALSE(fits(kPerson, R"({"name": "", "age": 1})"));           // minLength
  EXPECT_FALSE(fits(kPerson, R"({"name": "123456789", "age": 1})"));  // maxLength
  EXPECT_FALSE(fits(kPerson, R"({"name": "A", "age": 1.5})"));        // an integer
  EXPECT_FALSE(fits(kPerson, R"({"name": "A", "age": 1, "x": 2})"));  // no additional properties
  EXPECT_FALSE(fits(kPerson, R"({"name": "A", "age": 1, "tags": []})"));
  EXPECT_FALSE(fits(kPerson, R"({"name": "A", "age": 1, "tags": ["a", "b", "a"]})"));
  EXPECT_FALSE(fits(kPerson, R"({"name": "A", "age": 1, "tags": ["c"]})"));
  EXPECT_FALSE(fits(kPerson, R"({"name": "A", "age": 1, "home": {"city": "Rome"}})"));
  EXPECT_FALSE(fits(kPerson, R"({"name": "A\u0001", "age": 1})" "\x01"));
  EXPECT_FALSE(fits(ojson::parse(R"({"type": "integer"})"), "012"));  // no leading zeros
}

TEST(JsonSchemaGrammar, WhatCannotBeHeldIsRefusedByName) {
  for (const char* bad : {R"({"type": "string", "pattern": "a+"})", R"({"type": "integer", "minimum": 3})",
                          R"({"type": "string", "format": "date-time"})", R"({"allOf": [{"type": "object"}]})",
                          R"({"$ref": "#/$defs/missing"})", R"({"$ref": "https://example.com/s.json"})",
                          R"({"type": "thing"})", R"({"type": "object", "required": ["x"]})", "false"}) {
    EXPECT_THROW(json_schema_gbnf(ojson::parse(bad)), shoal::Error) << bad;
  }
  try {
    json_schema_gbnf(ojson::parse(R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "x"}}})"));
    FAIL();
  } catch (const shoal::Error& e) {
    EXPECT_NE(std::string(e.what()).find("schema.properties.id: 'pattern'"), std::string::npos) << e.what();
  }
}

TEST(JsonSchemaGrammar, LiteralsAreEscaped) {
  EXPECT_EQ(gbnf_literal("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\x01\"");
  EXPECT_TRUE(fits(ojson::parse(R"({"const": "say \"hi\"\n"})"), R"("say \"hi\"\n")"));
}

}  // namespace
}  // namespace shoal::server
