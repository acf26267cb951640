#pragma once
// This machine's memory as the kernel reports it (/proc/meminfo).
#include <cstdint>

namespace shoal {

struct SystemMemory {
  uint64_t total = 0;      // MemTotal, bytes
  uint64_t available = 0;  // MemAvailable (MemFree on old kernels), bytes
};

// Zeros where /proc/meminfo or a line is missing.
SystemMemory read_system_memory();

}  // namespace shoal
