#include "util/text_file.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace shoal {

std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (what.empty()) fail("cannot read {}", path);
    fail("cannot read {} file {}", what, path);
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace shoal
