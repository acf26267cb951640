#pragma once
// Host memory the Vulkan driver asks for on the device's behalf
// (VkAllocationCallbacks given at vkCreateDevice), from malloc and counted:
// a replayed step must ask for none per dispatch, and the tests read the
// count (the driver may call from its own threads).
#include <atomic>
#include <cstdint>

#include "backend/vulkan/vulkan_api.h"

namespace shoal {

class DriverAllocator {
 public:
  DriverAllocator();
  DriverAllocator(const DriverAllocator&) = delete;
  DriverAllocator& operator=(const DriverAllocator&) = delete;
  const VkAllocationCallbacks* callbacks() const { return &callbacks_; }
  // Allocations and reallocations so far.
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  static void* allocate(void* self, size_t size, size_t alignment, VkSystemAllocationScope);
  static void* reallocate(void* self, void* original, size_t size, size_t alignment, VkSystemAllocationScope);
  static void release(void* self, void* memory);
  VkAllocationCallbacks callbacks_{};
  std::atomic<uint64_t> count_{0};
};

}  // namespace shoal
