// What a build without the Vulkan backend has in its place (CMakeLists.txt
// compiles this file instead of the backend when glslc or the Vulkan headers
// were missing): no devices, and the reason, which `shoal devices` and
// `--device vulkan` print.
#include "backend/vulkan/vulkan_devices.h"
#include "util/error.h"

namespace shoal {

std::vector<VulkanDeviceInfo> list_vulkan_devices(std::string* why) {
  if (why) *why = SHOAL_VULKAN_ABSENT_WHY;
  return {};
}

int default_vulkan_device(const std::vector<VulkanDeviceInfo>&) { return 0; }

std::unique_ptr<Backend> make_vulkan_backend(int, int) { fail("{}", SHOAL_VULKAN_ABSENT_WHY); }

}  // namespace shoal
