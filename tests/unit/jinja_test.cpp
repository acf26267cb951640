// The Jinja engine's limits and its refusal of broken templates: every bad
// template ends in a TemplateError naming a line, never a crash or a hang
// (the sanitized build runs these too). Rendering against Python's jinja2
// on real templates is tests/e2e/test_chat_templates.py.
#include "jinja/template.h"

#include <gtest/gtest.h>

#include <chrono>

#include "jinja/error.h"

namespace shoal::jinja {
namespace {

std::string render(const std::string& source, const Limits& limits = {}) {
  return Template(source).render(nlohmann::ordered_json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}},
                                 limits);
}

void expect_error(const std::string& source, const std::string& needle, const Limits& limits = {}) {
  try {
    render(source, limits);
    FAIL() << "rendered: " << source.substr(0, 80);
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(JinjaBrokenTemplate, SyntaxErrorsNameTheirLine) {
  expect_error("line one\n{% if x %}\n{{ y }", "template line 3");
  expect_error("{% for a in b %}never closed", "missing {% endfor %}");
  expect_error("{{ 'unterminated }}", "unterminated string");
  expect_error("{% frobnicate %}", "unknown tag 'frobnicate'");
  expect_error("{# comment", "unclosed comment");
  expect_error("{% raw %}no end", "{% raw %} without {% endraw %}");
  expect_error("{{ 99999999999999999999999 }}", "integer out of range");
}

TEST(JinjaBrokenTemplate, EveryPrefixOfARealTemplateFailsCleanlyOrRenders) {
  const std::string source =
      "{%- set ns = namespace(n=0) -%}{% for m in messages if m.role != 'x' %}{{ '<|' ~ m.role ~ '|>' }}"
      "{%- if m.content is string %}{{ m.content | trim | tojson(indent=2) }}{% else %}{{ m.content[0:2] }}"
      "{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ {'a': [1, 2.5, none, true]} | tojson }}{# done #}";
  for (size_t n = 0; n <= source.size(); ++n) {
    try {
      render(source.substr(0, n));
    } catch (const TemplateError&) {
    }
  }
}

TEST(JinjaBrokenTemplate, EndlessLoopStopsAtTheTimeLimit) {
  Limits limits;
  limits.max_seconds = 0.2;
  auto start = std::chrono::steady_clock::now();
  expect_error("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
               "the template was stopped", limits);
  // Not a speed claim: a stop, not a hang (the sanitized build is slow).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(JinjaBrokenTemplate, HugeOutputStopsAtTheSizeLimit) {
  Limits limits;
  limits.max_output_bytes = 1 << 20;
  expect_error("{{ 'x' * 1000000000 }}", "output over", limits);
  expect_error("{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}", "output over", limits);
  expect_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "output over", limits);
  expect_error("{{ range(100000000) | length }}", "range() over", limits);
}

TEST(JinjaBrokenTemplate, DeepRecursionAndNestingStop) {
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested deeper");
  expect_error("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "nesting deeper");
  expect_error("{{ " + std::string(50000, '[') + " }}", "template line 1");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  expect_error(ifs, "nesting deeper");
}

TEST(JinjaBrokenTemplate, DeepValuesAndCyclesStopOrPrintSafely) {
  expect_error("{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
               "{{ ns.x }}",
               "nested deeper than 256");
  expect_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}", "not JSON serializable");
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns.me }}"), "[<Namespace>]");
  nlohmann::ordered_json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = nlohmann::ordered_json::array({deep});
  try {
    Template("{{ x }}").render({{"x", deep}});
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("nest deeper"), std::string::npos) << e.what();
  }
}

// The shapes an adversarial pass found: each stops within the limits,
// whatever its size, here and in the sanitized build.
TEST(JinjaBrokenTemplate, LongChainsAreRefusedAtParse) {
  auto chain = [](const std::string& first, const std::string& link, int n) {
    std::string s = "{{ " + first;
    for (int i = 0; i < n; ++i) s += link;
    return s + " }}";
  };
  for (const std::string& t : {chain("1", "+1", 10000), chain("1", "|string", 20000), chain("messages", ".x", 20000),
                               chain("'a'", "~'a'", 20000), chain("1", " and 1", 20000), chain("1", "*1", 300),
                               chain("x", "[0]", 20000), chain("f", "()", 20000), chain("x", "|default(1)", 300)})
    expect_error(t, "chained deeper than 256");
  // Real templates chain a few dozen; a long one still parses.
  EXPECT_EQ(render(chain("1", "+1", 200)), "201");
}

TEST(JinjaBrokenTemplate, RepetitionAndCopiesStopAtTheMemoryLimit) {
  Limits limits;
  limits.max_seconds = 60;  // the memory limit stops these, long before the clock
  expect_error("{% for i in range(60) %}{% set l = [0] * 4000000 %}{% endfor %}", "32 MiB", limits);
  expect_error("{% set ns = namespace(l=[0] * 100000) %}{% for i in range(1000) %}{% set ns.l = ns.l + ns.l %}"
               "{% endfor %}",
               "32 MiB", limits);
  expect_error("{% set s = 'x' * 16000000 %}{% for c in s %}{% endfor %}", "32 MiB", limits);
  expect_error("{% set s = ',' * 16000000 %}{{ s.split(',') | length }}", "32 MiB", limits);
  // Nothing repeated is nothing, however many times (found by the fuzzer:
  // it looped 10**18 times making an empty string).
  EXPECT_EQ(render("{{ '' * 1000000000000000000 }}{{ ([] * 1000000000000000000) | length }}", limits), "0");
  // A list that repeats one string shares it: slots only.
  EXPECT_EQ(render("{% set s = 'x' * 1000000 %}{% set l = [s] * 20000 %}{{ l | length }}", limits), "20000");
  // … but printing or joining it would make a 20 GB string.
  expect_error("{% set s = 'x' * 1000000 %}{{ [s] * 3000 }}", "output over", limits);
  expect_error("{% set s = 'x' * 1000000 %}{{ ([s] * 3000) | join }}", "output over", limits);
  expect_error("{{ ('a\n' * 1000000) | indent(1000000) }}", "output over", limits);
  expect_error("{{ '{0}' * 1000 | format }}", "template line 1", limits);
  // Captured text is memory the template holds: macros filling buffers.
  expect_error("{% macro f(n) %}{{ 'x' * 15000000 }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "template line 1",
               limits);
}

TEST(JinjaBrokenTemplate, WorkInsideOneOperationIsTimed) {
  Limits limits;
  limits.max_seconds = 0.2;
  const auto start = std::chrono::steady_clock::now();
  // Each step is one operation on a large value: the clock is read inside
  // them, by the elements and bytes they touch.
  expect_error("{% set l = [1] * 200000 %}{% for i in range(20000) %}{% if 2 in l %}{% endif %}{% endfor %}",
               "took over", limits);
  expect_error("{% set s = 'ab' * 4000000 %}{% for i in range(100000) %}{{ s.count('ba') }}{% endfor %}",
               "template line 1", limits);
  expect_error("{% set l = range(20000) | list %}{{ (l + l + l + l) | unique | length }}", "took over", limits);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(JinjaBrokenTemplate, IntegersPast64BitsAreAnErrorNotAWrapOrATrap) {
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-1) ** 100000000000 }} {{ 1 ** 100000000000 }} {{ 0 ** 0 }} "
                   "{{ (-9223372036854775807 - 1) % -1 }}"),
            "4611686018427387904 1 1 1 0");
  expect_error("{{ (-9223372036854775807 - 1) // -1 }}", "overflows 64 bits");  // idiv would trap
  expect_error("{{ 9223372036854775807 + 1 }}", "overflows 64 bits");
  expect_error("{{ 3037000500 * 3037000500 }}", "overflows 64 bits");
  expect_error("{{ 2 ** 64 }}", "overflows 64 bits");
}

TEST(JinjaBrokenTemplate, DeepStatementsInRecursiveMacrosStopAtTheStackShare) {
  std::string nest;
  for (int i = 0; i < 150; ++i) nest += "{% for i in [1] %}";
  nest += "{{ f(n + 1) }}";
  for (int i = 0; i < 150; ++i) nest += "{% endfor %}";
  expect_error("{% macro f(n) %}" + nest + "{% endmacro %}{{ f(0) }}", "nests too deeply");
}

TEST(JinjaBrokenTemplate, SearchIsLinearInBothLengths) {
  // A needle that almost matches everywhere: quadratic for a naive search.
  Limits limits;
  limits.max_seconds = 60;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(render("{% set h = 'a' * 8000000 %}{% set n = 'a' * 4000000 ~ 'b' %}{{ n in h }} {{ h.find(n) }} "
                   "{{ h.rfind(n) }} {{ h.count(n) }}",
                   limits),
            "False -1 -1 0");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(render("{{ 'abcabc'.rfind('bc') }} {{ 'abcabc'.find('c') }} {{ 'a,b,,c'.split(',') }}"),
            "4 2 ['a', 'b', '', 'c']");
}

TEST(Jinja, PythonSemanticsTemplatesRelyOn) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 2.0, {'k': 1e20}] }}"), "[1, 'a', None, True, 2.0, {'k': 1e+20}]");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"), "3 -4 2 3.5 1024");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  x y '.split() }} {{ 'héllo'[1:3] }} {{ 'héllo' | length }}"),
            "['a', 'b', '', 'c'] ['x', 'y'] él 5");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, 2]} | tojson }}|{{ 'é\"\\n' | tojson }}"),
            "{\"b\": 1, \"a\": [1, 2]}|\"é\\\"\\n\"");
  EXPECT_EQ(render("{{ {'a': 1} | tojson(indent=2) }}"), "{\n  \"a\": 1\n}");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ loop.index }}{{ loop.last }}"
                   "{% endfor %}"),
            "1False3True");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{{ messages[0].content }}{{ messages[0]['role'] }}{{ messages.0.content }}{{ missing }}"),
            "hiuserhi");
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\nafter\n"), "  x\nafter");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("{{ ('<'|safe) + '<' }}{{ ('<'|safe) ~ '<' }}"), "<&lt;<<");
}

}  // namespace
}  // namespace shoal::jinja
