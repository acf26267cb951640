#pragma once
// How deep a TOML text nests, measured before it is parsed. A table header
// or key of 50,000 dotted parts (a.a.a…) makes toml++ build, and later
// free, 50,000 nested tables by recursion: it takes the stack. The cluster
// files `shoal plan --cluster` reads are a user's, so their depth is
// bounded first, with the line named.
#include <string>
#include <string_view>

namespace shoal {

// Throws shoal::Error naming `source` and the line when a header or key
// has more than `max_depth` dotted parts, or arrays and inline tables nest
// deeper than `max_depth`.
void check_toml_depth(std::string_view text, const std::string& source, int max_depth = 32);

}  // namespace shoal
