#pragma once
// JSON Schema's `pattern` as a GBNF body for a JSON string's contents:
// the regex subset llama.cpp's converter takes — anchored ^…$, literals and
// escapes, `.`, classes ([a-z], [^…], \d \w \s and their negations),
// groups ( … ) and (?: … ), alternation, and the quantifiers ? * + {n}
// {n,} {n,m}. What the grammar writes is the JSON text of a string that
// matches: a quote or backslash the pattern allows comes out escaped, and a
// class or `.` never yields a raw control character (so a negated class
// or `.` is held to printable text: a subset of what the regex allows).
#include <string>

namespace shoal::server {

// Throws shoal::Error naming what the pattern uses that is not held.
std::string regex_gbnf(const std::string& pattern);

}  // namespace shoal::server
