#pragma once
// A whole small file (a prompt, a template, a key) as a string.
#include <string>
#include <string_view>

namespace shoal {

// Throws shoal::Error "cannot read <what> file <path>" ("cannot read <path>"
// without `what`) when the file cannot be opened.
std::string read_text_file(const std::string& path, std::string_view what = {});

}  // namespace shoal
