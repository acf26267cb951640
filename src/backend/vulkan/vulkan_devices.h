#pragma once
// The Vulkan devices of this machine, as `shoal devices` and the planner see
// them: name, kind and memory (free memory from VK_EXT_memory_budget where
// the driver has it, else the size of the device-local heap).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace shoal {

struct VulkanDeviceInfo {
  int index = 0;            // vulkan:N
  std::string name;         // "NVIDIA GeForce RTX 4090", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string kind;         // "discrete", "integrated", "virtual", "cpu", "other"
  uint64_t memory = 0;      // bytes of the largest device-local heap
  uint64_t free = 0;        // bytes free on it (== memory without a budget extension)
  bool has_budget = false;  // free came from VK_EXT_memory_budget
  std::string api;          // "1.3.230"
};

// Every device; empty with `why` set when Vulkan is absent (no loader, no
// driver, or a build without the Vulkan backend).
std::vector<VulkanDeviceInfo> list_vulkan_devices(std::string* why);
// What plain `--device vulkan` means: the first discrete GPU, else the
// first integrated one, else device 0 (lavapipe, where it is all there is).
int default_vulkan_device(const std::vector<VulkanDeviceInfo>& devices);
// A backend on device `index`; max_tokens sizes a step's rows. Throws
// shoal::Error saying why when there is no such device (or the build has
// no Vulkan backend).
std::unique_ptr<Backend> make_vulkan_backend(int index, int max_tokens);

}  // namespace shoal
