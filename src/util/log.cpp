#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace shoal {

void set_verbosity(int level) {
  static auto logger = [] {
    auto l = spdlog::stderr_color_mt("shoal");
    l->set_pattern("%^%l%$: %v");
    spdlog::set_default_logger(l);
    return l;
  }();
  logger->set_level(level <= 0 ? spdlog::level::warn : level == 1 ? spdlog::level::info : spdlog::level::debug);
}

}  // namespace shoal
