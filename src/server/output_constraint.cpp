#include "server/output_constraint.h"

#include "grammar/gbnf_parser.h"
#include "grammar/grammar_matcher.h"
#include "server/json_schema_grammar.h"
#include "server/tool_call_grammar.h"
#include "util/error.h"

namespace shoal::server {

void compile_output_constraint(GenerationRequest& g, const std::string& template_source) {
  const bool tools = !g.tool_names.empty();
  if (!g.tool_call_forced && g.constrained_by.empty()) return;
  const std::string param = g.tool_call_forced ? "tool_choice" : g.constrained_by;
  if (!g.gbnf.empty() && tools)
    throw ApiError(400, "Invalid 'grammar': a GBNF grammar cannot be combined with tools (send tool_choice 'none', "
                        "or a json_schema instead).", "invalid_request_error", "grammar", "invalid_value");
  try {
    std::string gbnf = g.gbnf;
    if (g.tool_call_forced) {
      gbnf = tool_call_gbnf(g.tools, g.forced_tool, g.parallel_tool_calls, tool_call_style(template_source));
    } else if (tools && !g.response_schema.is_null()) {
      gbnf = tool_call_gbnf(g.tools, "", g.parallel_tool_calls, tool_call_style(template_source), g.response_schema);
    } else if (!g.response_schema.is_null()) {
      gbnf = json_schema_gbnf(g.response_schema);
    }
    g.options.grammar = std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf));
    grammar::GrammarMatcher start(g.options.grammar);  // a grammar that cannot even start is the client's error
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("Invalid '{}': {}", param, e.what()), "invalid_request_error", param,
                   "invalid_value");
  }
}

}  // namespace shoal::server
