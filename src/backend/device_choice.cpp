#include "backend/device_choice.h"

#include <charconv>

#include <hwy/targets.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/vulkan/vulkan_devices.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal {

DeviceChoice parse_device(const std::string& text) {
  if (text == "cpu") return {};
  if (text == "vulkan") return {true, -1};
  if (text.rfind("vulkan:", 0) == 0) {
    int index = -1;
    const char* first = text.data() + 7;
    const char* last = text.data() + text.size();
    auto [end, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && end == last && first != last && index >= 0) return {true, index};
  }
  fail("unknown device '{}': expected cpu, vulkan or vulkan:N (`shoal devices` lists them)", text);
}

DeviceChoice resolve_device(const DeviceChoice& wanted) {
  if (!wanted.vulkan) return wanted;
  std::string why;
  const auto devices = list_vulkan_devices(&why);
  if (devices.empty()) {
    spdlog::warn("no Vulkan device ({}): running on the CPU", why);
    return {};
  }
  if (wanted.index < 0) return {true, default_vulkan_device(devices)};
  if (wanted.index >= static_cast<int>(devices.size())) {
    spdlog::warn("there is no Vulkan device {} (this machine has {}): running on the CPU", wanted.index,
                 devices.size());
    return {};
  }
  return wanted;
}

std::unique_ptr<Backend> make_layer_backend(const DeviceChoice& choice, ThreadPool& pool, int max_tokens,
                                            int64_t max_cols) {
  if (choice.vulkan) return make_vulkan_backend(choice.index, max_tokens);
  return std::make_unique<CpuBackend>(pool, max_tokens, max_cols);
}

std::string cpu_simd_target() {
  // The best target both compiled in and supported here (lower bits are better).
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return targets ? hwy::TargetName(targets & -targets) : "scalar";
}

}  // namespace shoal
