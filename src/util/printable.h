#pragma once
// Text from files and the command line on its way to a terminal: a control
// character (an escape sequence can recolour, retitle or clear the screen)
// is shown escaped, and a cut or invalid UTF-8 sequence as U+FFFD, so what
// a user sees is what the input held.
#include <string>
#include <string_view>

namespace shoal {

// C0 controls (but newline and tab where keep_layout), DEL and the C1
// controls as \xHH or \u00HH; each invalid UTF-8 byte as U+FFFD.
std::string printable(std::string_view text, bool keep_layout = false);
// Whether printable() would leave text as it is (no layout kept).
bool is_printable(std::string_view text);

}  // namespace shoal
