#include "backend/vulkan/driver_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace shoal {

namespace {
// Each block starts with the malloc'd address and the size asked for, just
// below the aligned address handed out.
struct Header {
  void* raw;
  size_t size;
};
Header* header_of(void* memory) { return static_cast<Header*>(memory) - 1; }
}  // namespace

DriverAllocator::DriverAllocator() {
  callbacks_.pUserData = this;
  callbacks_.pfnAllocation = &DriverAllocator::allocate;
  callbacks_.pfnReallocation = &DriverAllocator::reallocate;
  callbacks_.pfnFree = &DriverAllocator::release;
}

void* DriverAllocator::allocate(void* self, size_t size, size_t alignment, VkSystemAllocationScope) {
  // Mesa asks for 0 bytes (an empty array it copies) and takes NULL as
  // out of memory: a block it may free like any other.
  size = std::max<size_t>(size, 1);
  alignment = std::max(alignment, alignof(Header));
  void* raw = std::malloc(size + sizeof(Header) + alignment);
  if (!raw) return nullptr;
  const auto at = reinterpret_cast<uintptr_t>(raw) + sizeof(Header);
  void* memory = reinterpret_cast<void*>((at + alignment - 1) & ~(static_cast<uintptr_t>(alignment) - 1));
  *header_of(memory) = {raw, size};
  static_cast<DriverAllocator*>(self)->count_.fetch_add(1, std::memory_order_relaxed);
  return memory;
}

void* DriverAllocator::reallocate(void* self, void* original, size_t size, size_t alignment,
                                  VkSystemAllocationScope scope) {
  if (!original) return allocate(self, size, alignment, scope);
  if (size == 0) {
    release(self, original);
    return nullptr;
  }
  void* memory = allocate(self, size, alignment, scope);
  if (!memory) return nullptr;  // the original stays valid, as the spec asks
  std::memcpy(memory, original, std::min(size, header_of(original)->size));
  release(self, original);
  return memory;
}

void DriverAllocator::release(void*, void* memory) {
  if (memory) std::free(header_of(memory)->raw);
}

}  // namespace shoal
