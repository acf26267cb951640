#include "backend/vulkan/vulkan_devices.h"

#include <cstring>

#include <fmt/format.h>

#include "backend/vulkan/vulkan_api.h"

namespace shoal {
namespace {

const char* kind_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

bool has_extension(VkPhysicalDevice dev, const char* name) {
  uint32_t n = 0;
  vk::vkEnumerateDeviceExtensionProperties(dev, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> props(n);
  vk::vkEnumerateDeviceExtensionProperties(dev, nullptr, &n, props.data());
  for (const auto& p : props)
    if (std::strcmp(p.extensionName, name) == 0) return true;
  return false;
}

}  // namespace

std::vector<VulkanDeviceInfo> list_vulkan_devices(std::string* why) {
  VkInstance inst = vk::instance(why);
  if (!inst) return {};
  uint32_t n = 0;
  vk::vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> devs(n);
  vk::vkEnumeratePhysicalDevices(inst, &n, devs.data());
  if (n == 0 && why) *why = "the Vulkan loader found no device";
  std::vector<VulkanDeviceInfo> out;
  for (uint32_t i = 0; i < n; ++i) {
    VkPhysicalDeviceProperties props;
    vk::vkGetPhysicalDeviceProperties(devs[i], &props);
    VulkanDeviceInfo info;
    info.index = static_cast<int>(i);
    info.name = props.deviceName;
    info.kind = kind_name(props.deviceType);
    info.api = fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(props.apiVersion), VK_API_VERSION_MINOR(props.apiVersion),
                           VK_API_VERSION_PATCH(props.apiVersion));
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mem{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
    info.has_budget = has_extension(devs[i], VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    if (info.has_budget) mem.pNext = &budget;
    vk::vkGetPhysicalDeviceMemoryProperties2(devs[i], &mem);
    for (uint32_t h = 0; h < mem.memoryProperties.memoryHeapCount; ++h) {
      const VkMemoryHeap& heap = mem.memoryProperties.memoryHeaps[h];
      if (!(heap.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) || heap.size <= info.memory) continue;
      info.memory = heap.size;
      info.free = info.has_budget ? budget.heapBudget[h] - std::min(budget.heapBudget[h], budget.heapUsage[h])
                                  : heap.size;
    }
    out.push_back(info);
  }
  return out;
}

int default_vulkan_device(const std::vector<VulkanDeviceInfo>& devices) {
  for (const char* kind : {"discrete", "integrated", "virtual"})
    for (const VulkanDeviceInfo& d : devices)
      if (d.kind == kind) return d.index;
  return 0;
}

}  // namespace shoal
