#pragma once
// What a request's output is held to, compiled into options.grammar:
//   tool_choice required / a function     a call (server/tool_call_grammar.h);
//                                         a response_format is for the
//                                         content replies of later turns
//   tools (auto) + a response schema      a call, or JSON for the schema
//   a response schema (json_schema, json_object)   JSON for it
//   grammar                               the GBNF as given (tools: refused,
//                                         the two cannot be combined)
// A schema or grammar that cannot be held to is an ApiError 400 naming the
// parameter it came from.
#include <string>

#include "server/openai_types.h"

namespace shoal::server {

void compile_output_constraint(GenerationRequest& g, const std::string& template_source);

}  // namespace shoal::server
