#include "backend/vulkan/vulkan_api.h"

#include <dlfcn.h>

#include <mutex>

#include "util/error.h"

namespace shoal::vk {

#define SHOAL_VK_DEFINE(name) PFN_##name name = nullptr;
SHOAL_VK_FUNCTIONS(SHOAL_VK_DEFINE)
#undef SHOAL_VK_DEFINE

namespace {

struct Loaded {
  VkInstance instance = VK_NULL_HANDLE;
  std::string why;
};

Loaded load() {
  Loaded out;
  void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.why = "no Vulkan loader (libvulkan.so.1) on this machine";
    return out;
  }
  auto get_instance_proc = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  auto create_instance = get_instance_proc
                             ? reinterpret_cast<PFN_vkCreateInstance>(get_instance_proc(nullptr, "vkCreateInstance"))
                             : nullptr;
  if (!create_instance) {
    out.why = "the Vulkan loader has no vkCreateInstance";
    return out;
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "shoal";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  VkInstance inst = VK_NULL_HANDLE;
  const VkResult r = create_instance(&info, nullptr, &inst);
  if (r != VK_SUCCESS) {
    out.why = r == VK_ERROR_INCOMPATIBLE_DRIVER ? "no Vulkan 1.1 driver on this machine"
                                                : "vkCreateInstance failed (error " + std::to_string(r) + ")";
    return out;
  }
#define SHOAL_VK_LOAD(name) name = reinterpret_cast<PFN_##name>(get_instance_proc(inst, #name));
  SHOAL_VK_FUNCTIONS(SHOAL_VK_LOAD)
#undef SHOAL_VK_LOAD
#define SHOAL_VK_PRESENT(name) &&name
  if (!(true SHOAL_VK_FUNCTIONS(SHOAL_VK_PRESENT))) {
    out.why = "the Vulkan loader lacks a Vulkan 1.1 entry point";
    return out;
  }
#undef SHOAL_VK_PRESENT
  out.instance = inst;
  return out;
}

}  // namespace

VkInstance instance(std::string* why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.instance && why) *why = loaded.why;
  return loaded.instance;
}

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) fail("Vulkan: {} failed (VkResult {})", what, static_cast<int>(r));
}

}  // namespace shoal::vk
