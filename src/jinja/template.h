#pragma once
// A Jinja template, parsed once and rendered many times, as Python's jinja2
// renders it under Hugging Face's conventions (see lexer.h for the
// whitespace rules, builtins.h for what it may call). Rendering is bounded
// (interpreter.h, Limits).
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/ast.h"
#include "jinja/interpreter.h"

namespace shoal::jinja {

class Template {
 public:
  // Throws TemplateError naming the line of a syntax error.
  explicit Template(const std::string& source);

  // The variables are the members of `context` (a JSON object). Throws
  // TemplateError naming the line that failed or ran over a limit.
  std::string render(const nlohmann::ordered_json& context, const Limits& limits = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace shoal::jinja
