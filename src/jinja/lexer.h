#pragma once
// Splits a template into text and the tokens inside its tags, with the
// whitespace rules Hugging Face renders chat templates under: trim_blocks (a
// block or comment tag eats the newline after it), lstrip_blocks (spaces
// before a block or comment tag on its own line go), "-" and "+" inside a
// tag's delimiters, a single trailing newline of the source dropped, and
// {% raw %} copied as text.
#include <string>
#include <vector>

namespace shoal::jinja {

struct Token {
  enum class Kind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Kind kind;
  std::string text;  // the text, name, operator, or decoded string literal
  int line;
};

// Throws TemplateError naming the line for an unclosed tag or string.
std::vector<Token> tokenize(const std::string& source);

}  // namespace shoal::jinja
