// shoal devices: what this machine can lend, as --device names it.
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "backend/device_choice.h"
#include "backend/vulkan/vulkan_devices.h"
#include "cli/commands.h"
#include "util/system_memory.h"
#include "util/thread_pool.h"

namespace shoal::cli {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "CPU";
}

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }

int run_devices() {
  const SystemMemory mem = read_system_memory();
  std::printf("%-10s %s, %s, %d threads, %.1f GiB memory (%.1f GiB free)\n", "cpu", cpu_model_name().c_str(),
              cpu_simd_target().c_str(), ThreadPool::default_threads(), gib(mem.total), gib(mem.available));
  std::string why;
  const auto devices = list_vulkan_devices(&why);
  if (devices.empty()) std::printf("%-10s none: %s\n", "vulkan", why.c_str());
  for (const VulkanDeviceInfo& d : devices)
    std::printf("%-10s %s (%s, Vulkan %s), %.1f GiB memory (%.1f GiB free%s)\n",
                ("vulkan:" + std::to_string(d.index)).c_str(), d.name.c_str(),
                d.kind == "cpu" ? "a CPU-based device" : (d.kind + " GPU").c_str(), d.api.c_str(),
                gib(d.memory), gib(d.free), d.has_budget ? "" : ", no budget extension: the heap size");
  return 0;
}

}  // namespace

Command add_devices_command(CLI::App& app) {
  app.add_subcommand("devices", "list the devices this machine can run layers on (for --device)");
  return [] { return run_devices(); };
}

}  // namespace shoal::cli
