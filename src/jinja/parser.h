#pragma once
// Jinja2's grammar, as far as chat templates use it: output, if/elif/else,
// for (with else, an "if" filter, loop.*), set (names, ns.attr, blocks),
// macros, filter blocks, break/continue, and the expression language with
// jinja2's precedence (filters and tests bind tighter than arithmetic).
#include <string>

#include "jinja/ast.h"

namespace shoal::jinja {

// Throws TemplateError naming the line of a syntax error.
Body parse(const std::string& source);

}  // namespace shoal::jinja
