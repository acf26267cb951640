// libFuzzer: bytes as a chat template (a GGUF's tokenizer.chat_template is
// whatever its author wrote), parsed and rendered within small limits.
// Nothing may crash or hang, and no input may take more memory than the
// limits allow (libFuzzer's -rss_limit_mb); a bad template is a
// TemplateError. The mutator (structure_mutator.h) grows the deep, long and
// repeating shapes a hostile template has.
#include <cstddef>
#include <cstdint>
#include <string>

#include "jinja/error.h"
#include "jinja/template.h"
#include "structure_mutator.h"

namespace shoal::fuzz {

const std::vector<std::string_view> kFragments = {
    "{% for i in range(1000) %}", "{% endfor %}", "{% if true %}", "{% endif %}", "{{ ", " }}",
    "|string", "|join", "|tojson", "|list", "|reverse", "|indent(100000)", ".x", " ~ ", " + ", " and ", " * ",
    "[0] * 4000000", "'x' * 1000000", "[s] * 20000", "{% set s = 'x' * 100000 %}", "{% set l = [s] * 3000 %}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{% set ns = namespace(x=[]) %}",
    "{% set ns.x = ns.x + ns.x %}", "(", ")", "[", "]", "{", "}", "messages", "message.content",
    "range(1000000)", "loop.index", "{{ l }}", "|unique", "|sort", ".split(',')", ".replace('x', 'xx')",
    "|format(s, s)", "s in s", ".count(s)", ".rfind(s)", "|map('string')", "|selectattr('x')"};

std::string deep_shape(std::mt19937& rng, int depth) {
  static const char* const kJoins[] = {"+", "~", " and ", " or ", "|string", ".x", "*1", "|list", "==", " if 1 else "};
  static const char* const kNests[] = {"{% if true %}", "{% for i in [1] %}", "(", "[", "{% filter upper %}"};
  static const char* const kCloses[] = {"{% endif %}", "{% endfor %}", ")", "]", "{% endfilter %}"};
  std::string out;
  if (rng() % 2) {
    const char* join = kJoins[rng() % std::size(kJoins)];
    out = "{{ 1";
    for (int i = 0; i < depth; ++i) out += std::string(join) + (join[0] == '|' || join[0] == '.' ? "" : "1");
    return out + " }}";
  }
  const size_t kind = rng() % std::size(kNests);
  const bool expression = kNests[kind][0] == '(' || kNests[kind][0] == '[';
  if (expression) out = "{{ ";
  for (int i = 0; i < depth; ++i) out += kNests[kind];
  out += expression ? "1" : "x";
  for (int i = 0; i < depth; ++i) out += kCloses[kind];
  return expression ? out + " }}" : out;
}

}  // namespace shoal::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  shoal::jinja::Limits limits;
  limits.max_seconds = 0.5;
  limits.max_output_bytes = 1 << 16;
  limits.max_memory_bytes = 4 << 20;
  limits.max_range = 1 << 12;
  try {
    shoal::jinja::Template t(source);
    t.render(nlohmann::ordered_json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                    {"add_generation_prompt", true}},
             limits);
  } catch (const shoal::jinja::TemplateError&) {
  }
  return 0;
}
