#pragma once
// Which device runs a machine's layers, as --device names it ("cpu",
// "vulkan", "vulkan:N"), and the backend for it.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace shoal {

class ThreadPool;

struct DeviceChoice {
  bool vulkan = false;
  int index = -1;  // vulkan:N; -1: the best one (default_vulkan_device)
};

// Throws shoal::Error on anything but cpu, vulkan or vulkan:N.
DeviceChoice parse_device(const std::string& text);
// What this machine can honour: a Vulkan choice without Vulkan (no loader,
// no driver, no such device) becomes the CPU, with one warning line.
DeviceChoice resolve_device(const DeviceChoice& wanted);
// The backend for layers on `choice`: the CPU backend on `pool`, or the
// Vulkan backend of that device.
std::unique_ptr<Backend> make_layer_backend(const DeviceChoice& choice, ThreadPool& pool, int max_tokens,
                                            int64_t max_cols);
// The SIMD target this CPU's kernels run ("AVX2", "AVX3_ZEN4", "NEON", ...).
std::string cpu_simd_target();

}  // namespace shoal
