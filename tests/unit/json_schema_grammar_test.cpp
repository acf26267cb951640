// JSON Schema → GBNF: JSON that validates is a whole match of the grammar,
// JSON that does not is refused, and what cannot be enforced is refused
// by name.
#include "server/json_schema_grammar.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

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
  for (const char* bad : {R"({"type": "string", "pattern": "a+"})", R"({"type": "number", "minimum": 3})",
                          R"({"minimum": 3})", R"({"type": "integer", "minimum": 5, "maximum": 4})",
                          R"({"type": "integer", "maximum": 1e300})", R"({"type": "string", "format": "email"})",
                          R"({"type": "string", "format": "date", "maxLength": 4})",
                          R"({"allOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"a": {"type": "integer"}}}]})",
                          R"({"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 2})",
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

// Every integer from -1500 to 1500 (and a few far ones) fits exactly when
// it lies in the range: the digit-by-digit grammar has no gaps and no extras.
TEST(JsonSchemaGrammar, IntegerBoundsHoldEveryInteger) {
  struct Range {
    const char* schema;
    std::optional<int64_t> lo, hi;
  };
  const Range ranges[] = {
      {R"({"type": "integer", "minimum": 0})", 0, std::nullopt},
      {R"({"type": "integer", "minimum": 1, "maximum": 12})", 1, 12},
      {R"({"type": "integer", "minimum": -7, "maximum": 1234})", -7, 1234},
      {R"({"type": "integer", "minimum": -1000, "maximum": -15})", -1000, -15},
      {R"({"type": "integer", "exclusiveMinimum": 99, "exclusiveMaximum": 1000})", 100, 999},
      {R"({"type": "integer", "maximum": 250})", std::nullopt, 250},
      {R"({"type": "integer", "maximum": -3})", std::nullopt, -3},
      {R"({"type": "integer", "minimum": 19, "exclusiveMinimum": true})", 20, std::nullopt},
      {R"({"type": "integer", "minimum": 2.5, "maximum": 7.5})", 3, 7},
      {R"({"type": "integer", "minimum": 300, "maximum": 300})", 300, 300},
  };
  for (const Range& r : ranges) {
    SCOPED_TRACE(r.schema);
    grammar::GrammarMatcher base(std::make_shared<const grammar::Grammar>(
        grammar::parse_gbnf(json_schema_gbnf(ojson::parse(r.schema)))));
    auto fits_int = [&](int64_t n) {
      grammar::GrammarMatcher m = base;
      return m.accept(std::to_string(n)) && m.accepting();
    };
    std::vector<int64_t> values;
    for (int64_t n = -1500; n <= 1500; ++n) values.push_back(n);
    for (int64_t n : {int64_t{99999}, int64_t{-99999}, int64_t{123456789012345}, int64_t{-123456789012345}})
      values.push_back(n);
    for (int64_t n : values) {
      const bool in = (!r.lo || n >= *r.lo) && (!r.hi || n <= *r.hi);
      ASSERT_EQ(fits_int(n), in) << n;
    }
    grammar::GrammarMatcher m = base;
    EXPECT_FALSE(m.accept("007") && m.accepting());  // no leading zeros
  }
}

TEST(JsonSchemaGrammar, StringFormatsHoldOnlyValidValues) {
  const ojson date = ojson::parse(R"({"type": "string", "format": "date"})");
  for (const char* ok : {R"("2024-02-29")", R"("1999-12-31")", R"("2023-04-30")", R"("2023-01-09")"})
    EXPECT_TRUE(fits(date, ok)) << ok;
  for (const char* bad : {R"("2023-02-29")", R"("2023-04-31")", R"("2023-13-01")", R"("2023-00-10")",
                          R"("2023-01-00")", R"("0999-01-01")", R"("2023-1-01")"})
    EXPECT_FALSE(fits(date, bad)) << bad;
  const ojson time = ojson::parse(R"({"type": "string", "format": "time"})");
  EXPECT_TRUE(fits(time, R"("23:59:59Z")"));
  EXPECT_TRUE(fits(time, R"("08:00:00.125+02:00")"));
  EXPECT_FALSE(fits(time, R"("24:00:00Z")"));
  EXPECT_FALSE(fits(time, R"("12:00:00")"));  // RFC 3339 wants the offset
  const ojson stamp = ojson::parse(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(fits(stamp, R"("2026-12-07T10:00:00Z")"));
  EXPECT_FALSE(fits(stamp, R"("2026-12-07 10:00:00Z")"));
  const ojson uuid = ojson::parse(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(fits(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(fits(uuid, R"("123e4567-e89b-12d3-a456-42661417400")"));
  // A property named like a format's rule keeps its own rule.
  const ojson named = ojson::parse(R"({"type": "object", "$defs": {"format-date": {"type": "integer"}},
      "properties": {"d": {"type": "string", "format": "date"}, "n": {"$ref": "#/$defs/format-date"}},
      "required": ["d", "n"], "additionalProperties": false})");
  EXPECT_TRUE(fits(named, R"({"d": "2020-01-01", "n": 5})"));
}

TEST(JsonSchemaGrammar, PrefixItemsAndAllOf) {
  // pydantic's Tuple[int, str]
  const ojson pair = ojson::parse(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                                      "minItems": 2, "maxItems": 2})");
  EXPECT_TRUE(fits(pair, R"([1, "a"])"));
  EXPECT_FALSE(fits(pair, R"(["a", 1])"));
  EXPECT_FALSE(fits(pair, R"([1, "a", 2])"));
  const ojson more = ojson::parse(R"({"type": "array", "prefixItems": [{"const": "x"}], "items": {"type": "integer"},
                                      "maxItems": 3})");
  EXPECT_TRUE(fits(more, R"(["x"])"));
  EXPECT_TRUE(fits(more, R"(["x", 1, 2])"));
  EXPECT_FALSE(fits(more, R"(["x", 1, 2, 3])"));
  // allOf: a $ref'd base and an extension, merged (pydantic v1's field shape too).
  const ojson merged = ojson::parse(R"({"$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}},
                                                           "required": ["id"]}},
      "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"tag": {"type": "string"}}, "required": ["tag"]}],
      "additionalProperties": false})");
  EXPECT_TRUE(fits(merged, R"({"id": 1, "tag": "t"})"));
  EXPECT_FALSE(fits(merged, R"({"id": 1})"));
  EXPECT_FALSE(fits(merged, R"({"tag": "t"})"));
  EXPECT_TRUE(fits(ojson::parse(R"({"$defs": {"n": {"type": "integer", "minimum": 0}},
                                   "allOf": [{"$ref": "#/$defs/n"}], "description": "a count"})"), "42"));
}

// Patterns: each string fits exactly when Python's re.fullmatch says so
// (the cases below were checked there), and what the JSON text needs
// escaped comes out escaped.
TEST(JsonSchemaGrammar, AnchoredPatternsHoldTheirStrings) {
  struct Case {
    const char* pattern;
    std::vector<std::pair<std::string, bool>> texts;  // the JSON string's text, and whether it matches
  };
  const Case cases[] = {
      {R"(^[A-Z]{3}-\d{4}(/[a-z]+)?$)", {{"ABC-1234", true}, {"ABC-1234/xy", true}, {"AB-1234", false},
                                         {"ABC-12345", false}, {"ABC-1234/", false}, {"abc-1234", false}}},
      {R"(^(foo|ba[rz])+$)", {{"foo", true}, {"barbazfoo", true}, {"", false}, {"fo", false}, {"bax", false}}},
      {R"(^\w+@example\.com$)", {{"a_1@example.com", true}, {"a@exampleXcom", false}, {"@example.com", false}}},
      {R"(^(?:x|y){2,3}z?$)", {{"xy", true}, {"yyxz", true}, {"x", false}, {"xyxy", false}}},
      {R"(^[^a-c]*$)", {{"xyz 9", true}, {"xaz", false}, {"", true}}},
      {R"(^a"b\\c$)", {{R"(a\"b\\c)", true}, {R"(a"b\c)", false}}},
      {R"(^[ -~]{1,3}$)", {{R"(\")", true}, {R"(a\\)", true}, {"abcd", false}}},
      {R"(^\s?\S+$)", {{" x", true}, {R"(\tx)", true}, {"x", true}, {"  x", false}}},
      {R"(^.{2}$)", {{"ab", true}, {R"(\n)", false}, {"a", false}}},
  };
  for (const Case& c : cases) {
    const ojson schema = {{"type", "string"}, {"pattern", c.pattern}};
    for (const auto& [text, matches] : c.texts)
      EXPECT_EQ(fits(schema, "\"" + text + "\""), matches) << c.pattern << " on " << text;
  }
  for (const char* bad : {"[a-z]+", "^a+", "^(?=a)a$", R"(^(a)\1$)", "^a{2,1}$", "^a**$", "^[a-$", "^(a$",
                          R"(^\bword$)", "^a{5000}$"}) {
    try {
      json_schema_gbnf(ojson{{"type", "string"}, {"pattern", bad}});
      ADD_FAILURE() << bad << " was taken";
    } catch (const shoal::Error& e) {
      EXPECT_NE(std::string(e.what()).find("'pattern'"), std::string::npos) << bad << ": " << e.what();
    }
  }
}

TEST(JsonSchemaGrammar, LiteralsAreEscaped) {
  EXPECT_EQ(gbnf_literal("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\x01\"");
  EXPECT_TRUE(fits(ojson::parse(R"({"const": "say \"hi\"\n"})"), R"("say \"hi\"\n")"));
}

}  // namespace
}  // namespace shoal::server
