#pragma once
// Logging goes to stderr (stdout carries only generated text), through spdlog.
#include <spdlog/spdlog.h>

namespace shoal {

// Sets the stderr logger's level: 0 quiet (warnings), 1 info, 2 debug.
void set_verbosity(int level);

}  // namespace shoal
