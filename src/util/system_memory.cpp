#include "util/system_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace shoal {

SystemMemory read_system_memory() {
  SystemMemory m;
  uint64_t mem_free = 0;
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kib = 0;
    fields >> key >> kib;
    if (key == "MemTotal:") m.total = kib * 1024;
    else if (key == "MemAvailable:") m.available = kib * 1024;
    else if (key == "MemFree:") mem_free = kib * 1024;
  }
  if (m.available == 0) m.available = mem_free;  // kernels before 3.14 lack MemAvailable
  return m;
}

}  // namespace shoal
