#pragma once
// The Vulkan entry points Shoal calls, loaded at run time from the system's
// loader (libvulkan.so.1). Linking against it instead would stop the binary
// from starting on a machine without one; this way such a machine says so
// in one line and runs on the CPU.
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace shoal::vk {

#define SHOAL_VK_FUNCTIONS(X)                                                                              \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                      \
  X(vkGetPhysicalDeviceMemoryProperties) X(vkGetPhysicalDeviceMemoryProperties2)                          \
  X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice)     \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)                               \
  X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) \
  X(vkUnmapMemory) X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout)          \
  X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout)                      \
  X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool)     \
  X(vkResetDescriptorPool) X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets) X(vkCreateCommandPool)     \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)         \
  X(vkResetCommandBuffer) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdPushConstants)             \
  X(vkCmdDispatch) X(vkCmdCopyBuffer) X(vkCmdPipelineBarrier) X(vkCreateFence) X(vkDestroyFence)            \
  X(vkResetFences) X(vkWaitForFences) X(vkQueueSubmit) X(vkDeviceWaitIdle) X(vkFreeDescriptorSets)

#define SHOAL_VK_DECLARE(name) extern PFN_##name name;
SHOAL_VK_FUNCTIONS(SHOAL_VK_DECLARE)
#undef SHOAL_VK_DECLARE

// The process's Vulkan instance, created on first use and kept. Returns
// VK_NULL_HANDLE and sets `why` when there is no loader or no driver.
VkInstance instance(std::string* why);

// Throws shoal::Error naming the call when r is not VK_SUCCESS.
void check(VkResult r, const char* what);

}  // namespace shoal::vk
