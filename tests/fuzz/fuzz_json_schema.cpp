// libFuzzer: bytes as a response_format's JSON Schema (any client may send
// one), or, after a leading 'P', as a string's `pattern`: the grammar built
// from it is parsed and walked over a short JSON text. Nothing may crash or
// hang; what cannot be held is a shoal::Error naming it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/gbnf_parser.h"
#include "grammar/grammar_matcher.h"
#include "server/json_schema_grammar.h"
#include "util/error.h"

namespace {

void build_and_walk(const nlohmann::ordered_json& schema, const char* text) {
  const std::string gbnf = shoal::server::json_schema_gbnf(schema);
  auto grammar = std::make_shared<const shoal::grammar::Grammar>(shoal::grammar::parse_gbnf(gbnf));
  shoal::grammar::GrammarMatcher matcher(grammar);
  matcher.accept(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    if (!input.empty() && input[0] == 'P') {
      build_and_walk({{"type", "string"}, {"pattern", input.substr(1)}}, "\"ab-12\"");
    } else {
      const auto schema = nlohmann::ordered_json::parse(input, nullptr, false);
      if (!schema.is_discarded()) build_and_walk(schema, "{\"a\": [1, \"x\"]}");
    }
  } catch (const shoal::Error&) {
    // refused by name: what a client gets as a 400
  }
  return 0;
}
