#include "backend/vulkan/vulkan_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/rope_angles.h"
#include "backend/vulkan/shader_table.h"
#include "backend/vulkan/shaders/elementwise_ops.h"
#include "backend/vulkan/vulkan_devices.h"
#include "tensor/dequantize.h"
#include "util/error.h"
#include "util/log.h"

namespace shoal {

class VulkanBuffer : public Buffer {
 public:
  VulkanBuffer(VulkanBackend& owner, size_t bytes, VkBuffer buffer, VkDeviceMemory memory, void* mapped)
      : Buffer(bytes), owner_(owner), buffer_(buffer), memory_(memory), mapped_(static_cast<uint8_t*>(mapped)) {}
  ~VulkanBuffer() override {
    owner_.forget_buffer(buffer_);
    vk::vkDestroyBuffer(owner_.device_, buffer_, nullptr);
    vk::vkFreeMemory(owner_.device_, memory_, nullptr);
    owner_.held_bytes_ -= bytes();
  }
  VkBuffer handle() const { return buffer_; }
  uint8_t* mapped() const { return mapped_; }

 private:
  VulkanBackend& owner_;
  VkBuffer buffer_;
  VkDeviceMemory memory_;
  uint8_t* mapped_;
};

namespace {

constexpr size_t kStagingBytes = 32u << 20;  // host-visible transfer area
constexpr uint32_t kPushBytes = 128;
constexpr int kRopeTables = 4;      // distinct rope parameter sets in one step (gemma3 has two)
constexpr int kMaxRopePairs = 256;  // rope_dim <= 512
size_t rope_table_bytes(int max_tokens) { return static_cast<size_t>(max_tokens) * kMaxRopePairs * 2 * sizeof(float); }

VkBuffer vk_buffer(DevicePtr p) { return static_cast<VulkanBuffer*>(p.buffer)->handle(); }

uint32_t u32(size_t v) {
  if (v > 0xFFFFFFFFull) fail("Vulkan: offset {} does not fit a shader's 32-bit index", v);
  return static_cast<uint32_t>(v);
}
uint32_t floats(DevicePtr p) { return u32(p.offset / sizeof(float)); }

// The shader table's index of a shader, or -1.
int shader_index(const std::string& name) {
  for (size_t i = 0; i < kSpirvShaderCount; ++i)
    if (name == kSpirvShaders[i].name) return static_cast<int>(i);
  return -1;
}

// The types with shaders (CMakeLists.txt names them once); the others are
// widened to F32 on upload.
bool has_matmul_shader(DType t) { return shader_index("matmul_" + std::string(dtype_info(t).name)) >= 0; }

uint32_t kv_code(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q8_0: return 2;
    default: fail("Vulkan: KV cache type {} has no shader", dtype_info(t).name);
  }
}

// Rows a matmul.comp workgroup covers: 32 threads x ROWS (4, and 8 in the
// one-token MATVEC build the routed experts use too).
constexpr int64_t kMatmulGroupRows = 128, kMatvecGroupRows = 256;
// Attention's splits (attention_merge.glsl's SPLIT_POSITIONS): a step of
// at most kAttentionSplitTokens tokens over more than one split runs each on
// its own workgroups, up to kAttentionMaxSplits of them, their partials in
// at most kAttentionPartsBytes.
constexpr int kAttentionSplit = 512, kAttentionSplitTokens = 8, kAttentionMaxSplits = 64;
constexpr size_t kAttentionPartsBytes = 32u << 20;
// The TILED build's workgroup: 64 rows (a thread each) by 32 tokens.
constexpr int64_t kTiledGroupRows = 64;
constexpr int kTiledGroupTokens = 32;

uint32_t bindings_of(const std::string& shader) {
  if (shader == "attention") return 7;
  if (shader == "delta_conv") return 4;
  if (shader == "delta_norm") return 1;
  if (shader == "copy_rows") return 2;
  if (shader == "delta_rule") return 8;
  if (shader == "rope") return 2;
  if (shader.starts_with("routed_")) return 4;
  return 3;
}

// Bytes a shader reads or writes: [p.offset, p.offset + bytes).
BufferRange range(DevicePtr p, size_t bytes) { return {vk_buffer(p), p.offset, p.offset + bytes}; }
// Workgroups of 256 threads for n values: x up to 65535 (every device's
// minimum limit), the rest in y; the shader rebuilds the index from groups_x.
struct FlatGrid {
  uint32_t x, y;
};
FlatGrid flat_grid(uint64_t n) {
  const uint64_t groups = (n + 255) / 256;
  const auto x = static_cast<uint32_t>(std::min<uint64_t>(groups, 65535));
  return {x, static_cast<uint32_t>((groups + x - 1) / x)};
}
size_t rows_bytes(int64_t rows, int64_t width) { return static_cast<size_t>(rows) * width * sizeof(float); }

size_t device_bytes(const Matrix& m) {
  return has_matmul_shader(m.type) ? m.bytes() : static_cast<size_t>(m.rows) * m.cols * sizeof(float);
}

}  // namespace

VulkanBackend::VulkanBackend(int index, int max_tokens) : index_(index), max_tokens_(max_tokens) {
  std::string why;
  VkInstance inst = vk::instance(&why);
  if (!inst) fail("Vulkan is not available: {}", why);
  uint32_t n = 0;
  vk::vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> devs(n);
  vk::vkEnumeratePhysicalDevices(inst, &n, devs.data());
  if (index < 0 || static_cast<uint32_t>(index) >= n)
    fail("there is no Vulkan device {} (this machine has {}; `shoal devices` lists them)", index, n);
  physical_ = devs[index];

  VkPhysicalDeviceProperties props;
  vk::vkGetPhysicalDeviceProperties(physical_, &props);
  name_ = props.deviceName;
  max_buffer_range_ = props.limits.maxStorageBufferRange;
  for (int i = 0; i < 3; ++i) max_groups_[i] = props.limits.maxComputeWorkGroupCount[i];
  // The tiled build's shared memory: a tile of activations and a chunk a row (16 KiB: Vulkan's least).
  tiled_matmul_ = props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU && props.limits.maxComputeSharedMemorySize >= 16384;
  if (const char* tiled = std::getenv("SHOAL_VULKAN_TILED")) tiled_matmul_ = std::string(tiled) == "1";
  if (props.apiVersion < VK_API_VERSION_1_1) fail("Vulkan device {} only speaks Vulkan 1.0; Shoal needs 1.1", name_);
  if (props.limits.maxComputeSharedMemorySize < 4096 || props.limits.maxComputeWorkGroupSize[0] < 256 ||
      props.limits.maxComputeWorkGroupInvocations < 256)
    fail("Vulkan device {} is too small for Shoal's shaders (workgroups of 256 threads, 4 KiB shared)", name_);

  uint32_t n_families = 0;
  vk::vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_families, nullptr);
  std::vector<VkQueueFamilyProperties> families(n_families);
  vk::vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n_families, families.data());
  uint32_t family = n_families;
  for (uint32_t i = 0; i < n_families && family == n_families; ++i)
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = i;
  if (family == n_families) fail("Vulkan device {} has no compute queue", name_);

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue_info.queueFamilyIndex = family;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  VkDeviceCreateInfo device_info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  device_info.queueCreateInfoCount = 1;
  device_info.pQueueCreateInfos = &queue_info;
  vk::check(vk::vkCreateDevice(physical_, &device_info, driver_allocator_.callbacks(), &device_), "vkCreateDevice");
  try {
    init(family);
  } catch (...) {
    release();
    throw;
  }
}

void VulkanBackend::init(uint32_t family) {
  vk::vkGetDeviceQueue(device_, family, 0, &queue_);
  vk::vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);
  for (uint32_t h = 0; h < memory_.memoryHeapCount; ++h)
    if (memory_.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      heap_bytes_ = std::max<uint64_t>(heap_bytes_, memory_.memoryHeaps[h].size);

  pipelines_.resize(kSpirvShaderCount);  // compiled at load (prepare_weights), or on first use
  recorder_ = std::make_unique<VulkanRecorder>(device_, queue_, family, pipelines_, counters_);
  for (const char* name : {"rmsnorm", "rope", "elementwise", "attention", "kv_store", "route", "weighted_sum",
                           "delta_conv", "delta_norm", "delta_rule", "copy_rows", "attention_combine"})
    fixed_shaders_.push_back(shader_index(name));
  for (size_t i = 0; i < kSpirvShaderCount; ++i) {
    const std::string name = kSpirvShaders[i].name;
    for (int t = 0; t < kTypeSlots; ++t) {
      const DTypeInfo* info = find_dtype(static_cast<uint32_t>(t));
      if (!info) continue;
      if (name == "matmul_" + std::string(info->name)) matmul_shader_[t] = static_cast<int16_t>(i);
      if (name == "matvec_" + std::string(info->name)) matvec_shader_[t] = static_cast<int16_t>(i);
      if (name == "tiled_" + std::string(info->name)) tiled_shader_[t] = static_cast<int16_t>(i);
      if (name == "routed_" + std::string(info->name)) routed_shader_[t] = static_cast<int16_t>(i);
      if (name == "get_rows_" + std::string(info->name)) get_rows_shader_[t] = static_cast<int16_t>(i);
    }
  }

  staging_ = make_buffer(kStagingBytes, true);
  rows_ = make_buffer(2 * static_cast<size_t>(max_tokens_) * sizeof(int32_t), false);
  dummy_ = make_buffer(16, false);
  lookup_ids_ = make_buffer(static_cast<size_t>(max_tokens_) * sizeof(int32_t), false);
  rope_tables_ = make_buffer(kRopeTables * rope_table_bytes(max_tokens_), false);
}

VulkanBackend::~VulkanBackend() {
  try {
    flush();
  } catch (const std::exception&) {
    // A lost device: nothing recorded will run; free what can be freed.
  }
  release();
}

void VulkanBackend::release() {
  if (device_) vk::vkDeviceWaitIdle(device_);
  if (recorder_) recorder_->drop();
  weights_.clear();
  staging_.reset();
  rows_.reset();
  dummy_.reset();
  attention_parts_.reset();
  lookup_ids_.reset();
  rope_tables_.reset();
  recorder_.reset();
  for (VulkanPipeline& p : pipelines_) {
    if (!p.pipeline) continue;
    vk::vkDestroyPipeline(device_, p.pipeline, nullptr);
    vk::vkDestroyPipelineLayout(device_, p.layout, nullptr);
    vk::vkDestroyDescriptorSetLayout(device_, p.set_layout, nullptr);
  }
  pipelines_.clear();
  if (device_) vk::vkDestroyDevice(device_, driver_allocator_.callbacks());
  device_ = VK_NULL_HANDLE;
}

uint64_t VulkanBackend::free_memory() const {
  std::string why;
  for (const VulkanDeviceInfo& d : list_vulkan_devices(&why))
    if (d.index == index_ && d.has_budget) return d.free;
  const uint64_t held = held_bytes_.load();
  return heap_bytes_ - std::min(heap_bytes_, held);
}

std::unique_ptr<VulkanBuffer> VulkanBackend::make_buffer(size_t bytes, bool host_visible) {
  // Whole 16-byte units: shaders read bytes through 32-bit words, and the
  // last word of a tensor must be inside the buffer.
  const size_t size = std::max<size_t>((bytes + 15) & ~size_t{15}, 16);
  if (size > max_buffer_range_)
    fail("Vulkan device {} cannot bind a buffer of {} MiB (its limit is {} MiB)", name_, size >> 20,
         max_buffer_range_ >> 20);
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = size;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkBuffer buffer = VK_NULL_HANDLE;
  vk::check(vk::vkCreateBuffer(device_, &info, nullptr, &buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vk::vkGetBufferMemoryRequirements(device_, buffer, &req);
  // The first allowed type with the properties wanted (host-visible
  // staging: cached if there is such a type, for the downloads).
  const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const VkMemoryPropertyFlags wanted[] = {
      host_visible ? host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT : VkMemoryPropertyFlags{VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT},
      host_visible ? host : VkMemoryPropertyFlags{VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT}};
  uint32_t type = memory_.memoryTypeCount;
  for (VkMemoryPropertyFlags want : wanted)
    for (uint32_t i = 0; i < memory_.memoryTypeCount && type == memory_.memoryTypeCount; ++i)
      if ((req.memoryTypeBits & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & want) == want) type = i;
  if (type == memory_.memoryTypeCount) {
    vk::vkDestroyBuffer(device_, buffer, nullptr);
    fail("Vulkan device {}: no memory type suits a buffer", name_);
  }
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = type;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  const VkResult r = vk::vkAllocateMemory(device_, &alloc, nullptr, &memory);
  if (r != VK_SUCCESS) {
    vk::vkDestroyBuffer(device_, buffer, nullptr);
    throw OutOfMemory(fmt::format("Vulkan device {} is out of memory: {} MiB more did not fit beside the {} MiB held",
                                  name_, size >> 20, held_bytes_.load() >> 20));
  }
  void* mapped = nullptr;
  VkResult bound = vk::vkBindBufferMemory(device_, buffer, memory, 0);
  if (bound == VK_SUCCESS && host_visible) bound = vk::vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &mapped);
  if (bound != VK_SUCCESS) {
    vk::vkDestroyBuffer(device_, buffer, nullptr);
    vk::vkFreeMemory(device_, memory, nullptr);
    vk::check(bound, "binding or mapping a buffer");
  }
  held_bytes_ += size;
  return std::make_unique<VulkanBuffer>(*this, size, buffer, memory, mapped);
}

std::unique_ptr<Buffer> VulkanBackend::allocate(size_t bytes) { return make_buffer(bytes, false); }

uint16_t VulkanBackend::pipeline(int index) {
  if (index < 0 || static_cast<size_t>(index) >= pipelines_.size()) fail("internal: no such shader");
  VulkanPipeline& p = pipelines_[index];
  if (p.pipeline) return static_cast<uint16_t>(index);
  const SpirvShader& spirv = kSpirvShaders[index];
  p.bindings = bindings_of(spirv.name);
  std::vector<VkDescriptorSetLayoutBinding> bindings(p.bindings);
  for (uint32_t i = 0; i < p.bindings; ++i)
    bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set_info.bindingCount = p.bindings;
  set_info.pBindings = bindings.data();
  vk::check(vk::vkCreateDescriptorSetLayout(device_, &set_info, nullptr, &p.set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &p.set_layout;
  layout_info.pushConstantRangeCount = 1;
  layout_info.pPushConstantRanges = &push;
  vk::check(vk::vkCreatePipelineLayout(device_, &layout_info, nullptr, &p.layout), "vkCreatePipelineLayout");
  VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module_info.codeSize = spirv.n_words * 4;
  module_info.pCode = spirv.words;
  VkShaderModule module = VK_NULL_HANDLE;
  vk::check(vk::vkCreateShaderModule(device_, &module_info, nullptr, &module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.layout = p.layout;
  const VkResult r = vk::vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &p.pipeline);
  vk::vkDestroyShaderModule(device_, module, nullptr);
  if (r != VK_SUCCESS) p.pipeline = VK_NULL_HANDLE;
  vk::check(r, "vkCreateComputePipelines");
  ++counters_.pipelines_compiled;
  return static_cast<uint16_t>(index);
}

void VulkanBackend::flush() {
  if (recorder_->empty()) return;
  try {
    recorder_->submit_and_wait();
    for (const PendingDownload& d : downloads_) std::memcpy(d.dst, staging_->mapped() + d.staging_offset, d.bytes);
  } catch (...) {
    forget_recorded();
    throw;
  }
  forget_recorded();
}

void VulkanBackend::forget_recorded() {
  recorder_->drop();
  downloads_.clear();
  staging_used_ = 0;
}

void VulkanBackend::forget_buffer(VkBuffer b) {
  if (!recorder_) return;
  // A step that frees a buffer its commands use runs them first (only a
  // test does); a buffer nothing pending names is freed without a wait.
  if (recorder_->uses(b)) {
    try {
      flush();
    } catch (const std::exception&) {
      vk::vkDeviceWaitIdle(device_);
    }
  }
  recorder_->forget_buffer(b);
}

size_t VulkanBackend::stage_bytes(size_t bytes) {
  if (staging_used_ + bytes > kStagingBytes) flush();
  const size_t at = staging_used_;
  staging_used_ += (bytes + 15) & ~size_t{15};
  return at;
}

void VulkanBackend::copy_command(VkBuffer src, size_t src_offset, VkBuffer dst, size_t dst_offset, size_t bytes) {
  VulkanCommand c;
  c.is_dispatch = false;
  c.copy_src = src;
  c.copy_dst = dst;
  c.region = {src_offset, dst_offset, bytes};
  c.n_reads = 1;
  c.reads[0] = {src, src_offset, src_offset + bytes};
  c.n_writes = 1;
  c.writes[0] = {dst, dst_offset, dst_offset + bytes};
  recorder_->add(c);
}

namespace {
void check_range(DevicePtr p, size_t bytes, const char* what) {
  if (p.offset > p.buffer->bytes() || bytes > p.buffer->bytes() - p.offset)
    fail("internal: {} of {} bytes at {} outside a buffer of {}", what, bytes, p.offset, p.buffer->bytes());
}
}  // namespace

void VulkanBackend::upload(DevicePtr dst, const void* src, size_t bytes) {
  check_range(dst, bytes, "upload");
  const auto* from = static_cast<const uint8_t*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t chunk = std::min(bytes - done, kStagingBytes);
    const size_t at = stage_bytes(chunk);
    std::memcpy(staging_->mapped() + at, from + done, chunk);
    copy_command(staging_->handle(), at, vk_buffer(dst), dst.offset + done, chunk);
    done += chunk;
  }
}

void VulkanBackend::download(void* dst, DevicePtr src, size_t bytes) {
  check_range(src, bytes, "download");
  auto* to = static_cast<uint8_t*>(dst);
  for (size_t done = 0; done < bytes;) {
    const size_t chunk = std::min(bytes - done, kStagingBytes);
    const size_t at = stage_bytes(chunk);
    copy_command(vk_buffer(src), src.offset + done, staging_->handle(), at, chunk);
    downloads_.push_back({to + done, at, chunk});
    done += chunk;
  }
  flush();
}

void VulkanBackend::copy(DevicePtr dst, DevicePtr src, size_t bytes) {
  if (bytes == 0) return;
  check_range(src, bytes, "copy");
  check_range(dst, bytes, "copy");
  if (src.buffer == dst.buffer && src.offset < dst.offset + bytes && dst.offset < src.offset + bytes)
    fail("internal: a copy between overlapping regions");
  copy_command(vk_buffer(src), src.offset, vk_buffer(dst), dst.offset, bytes);
  KernelTraffic& traffic = counters_.kernels[static_cast<size_t>(KernelClass::Copy)];
  ++traffic.dispatches;
  traffic.bytes_read += static_cast<double>(bytes);
  traffic.bytes_written += static_cast<double>(bytes);
  if (!in_step_) flush();  // a KV copy between steps is done when it returns
}

void VulkanBackend::dispatch(int shader, std::initializer_list<VkBuffer> buffers, const void* push, size_t push_bytes,
                             uint32_t gx, uint32_t gy, uint32_t gz, std::initializer_list<BufferRange> reads,
                             std::initializer_list<BufferRange> writes, const Traffic& traffic) {
  if (gx > max_groups_[0] || gy > max_groups_[1] || gz > max_groups_[2])
    fail("Vulkan: {} needs {}x{}x{} workgroups, more than the device's {}x{}x{}", kSpirvShaders[shader].name, gx, gy,
         gz, max_groups_[0], max_groups_[1], max_groups_[2]);
  VulkanCommand c;
  c.pipeline = pipeline(shader);
  if (buffers.size() > VulkanCommand::kMaxBindings || reads.size() > VulkanCommand::kMaxReads ||
      writes.size() > VulkanCommand::kMaxWrites || push_bytes > kPushBytes || push_bytes % 4 != 0)
    fail("internal: a dispatch of {} beyond the recorder's limits", kSpirvShaders[shader].name);
  c.n_bindings = static_cast<uint8_t>(buffers.size());
  std::copy(buffers.begin(), buffers.end(), c.bindings);
  c.groups[0] = gx;
  c.groups[1] = gy;
  c.groups[2] = gz;
  c.push_words = static_cast<uint32_t>(push_bytes / 4);
  std::memcpy(c.push, push, push_bytes);
  c.n_reads = static_cast<uint8_t>(reads.size());
  std::copy(reads.begin(), reads.end(), c.reads);
  c.n_writes = static_cast<uint8_t>(writes.size());
  std::copy(writes.begin(), writes.end(), c.writes);
  recorder_->add(c);
  KernelTraffic& k = counters_.kernels[static_cast<size_t>(traffic.kind)];
  ++k.dispatches;
  k.bytes_read += traffic.read;
  k.bytes_written += traffic.written;
  k.flops += traffic.flops;
}

void VulkanBackend::prepare_matrix(const Matrix& m, int64_t slice_rows) {
  auto held = weights_.find(m.data);
  if (held != weights_.end() && held->second.host_bytes == m.bytes() && held->second.host_row_stride == m.row_stride())
    return;  // shared by two roles (or prepared twice)
  if (held != weights_.end()) weights_.erase(held);
  if (m.interleaved) fail("internal: the Vulkan backend was given rows grouped for the CPU");
  DeviceWeight w;
  w.host = m.data;
  w.host_bytes = m.bytes();
  w.host_row_stride = m.row_stride();
  w.type = has_matmul_shader(m.type) ? m.type : DType::F32;
  if (w.type != m.type && !warned_widened_) {
    spdlog::warn("Vulkan: {} weights have no shader yet and are held as f32 on the GPU ({}x their size)",
                 dtype_info(m.type).name, row_bytes(DType::F32, m.cols) / m.row_stride());
    warned_widened_ = true;
  }
  w.row_stride = row_bytes(w.type, m.cols);
  // A matrix larger than one buffer may bind (a vocabulary on lavapipe's
  // 128 MiB) is held in parts of whole rows (whole slices: an expert is
  // never cut), each op running once per part.
  const int64_t granule = std::max<int64_t>(1, slice_rows);
  w.part_rows = std::min<int64_t>(m.rows, static_cast<int64_t>((max_buffer_range_ - 16) / w.row_stride) / granule * granule);
  if (w.part_rows < 1)
    fail("Vulkan device {} cannot bind {} rows of {} bytes (its limit is {} MiB)", name_, granule, w.row_stride,
         max_buffer_range_ >> 20);
  for (int64_t first = 0; first < m.rows; first += w.part_rows) {
    const int64_t n_rows = std::min(w.part_rows, m.rows - first);
    w.parts.push_back(make_buffer(static_cast<size_t>(n_rows) * w.row_stride, false));
    const DevicePtr dst{w.parts.back().get(), 0};
    if (w.type == m.type) {
      upload(dst, m.row(first), static_cast<size_t>(n_rows) * m.row_stride());
      continue;
    }
    // Widened in slices of rows, so the host copy stays small.
    const int64_t step = std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / w.row_stride));
    std::vector<float> rows(static_cast<size_t>(std::min(step, n_rows) * m.cols));
    for (int64_t r = 0; r < n_rows; r += step) {
      const int64_t n = std::min(step, n_rows - r);
      for (int64_t i = 0; i < n; ++i) dequantize_row(m.type, m.row(first + r + i), rows.data() + i * m.cols, m.cols);
      upload(dst.bytes(static_cast<size_t>(r) * w.row_stride), rows.data(), static_cast<size_t>(n) * w.row_stride);
    }
  }
  weights_.emplace(m.data, std::move(w));
}

uint64_t VulkanBackend::prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory&) {
  const uint64_t before = held_bytes_;
  // The pipelines the stage's ops use are compiled now, not in its first step.
  for (int shader : fixed_shaders_) pipeline(shader);
  for (const WeightToPrepare& w : weights)
    if (!w.matrix->empty()) {
      prepare_matrix(*w.matrix, w.slice_rows);
      const auto t = static_cast<size_t>(held_weight(*w.matrix).type);
      pipeline(tiled_matmul_ ? tiled_shader_[t] : matmul_shader_[t]);
      pipeline(matvec_shader_[t]);
      if (w.experts) pipeline(routed_shader_[t]);
      pipeline(get_rows_shader_[t]);
    }
  flush();
  return held_bytes_ - before;
}

uint64_t VulkanBackend::prepared_bytes(std::span<const WeightToPrepare> weights) const {
  uint64_t total = 0;
  for (const WeightToPrepare& w : weights)
    if (!w.matrix->empty()) total += device_bytes(*w.matrix);
  return total;
}

const VulkanBackend::DeviceWeight& VulkanBackend::held_weight(const Matrix& m, int64_t* first_row) const {
  auto it = weights_.upper_bound(m.data);
  if (it == weights_.begin()) fail("internal: a matrix the Vulkan backend was not given");
  --it;
  const DeviceWeight& w = it->second;
  const size_t at = static_cast<size_t>(m.data - w.host);
  if (at >= w.host_bytes) fail("internal: a matrix the Vulkan backend was not given");
  if (first_row) *first_row = static_cast<int64_t>(at / w.host_row_stride);  // whole rows (an expert's slice)
  return w;
}

template <class F>
void VulkanBackend::for_each_part(const Matrix& m, F&& f) const {
  int64_t first = 0;
  const DeviceWeight& w = held_weight(m, &first);
  for (int64_t r = first; r < first + m.rows;) {
    const int64_t part = r / w.part_rows, within = r - part * w.part_rows;
    const int64_t n = std::min(w.part_rows - within, first + m.rows - r);
    f(WeightPart{w.parts[part]->handle(), static_cast<size_t>(within) * w.row_stride, r - first, n, w.type,
                 w.row_stride});
    r += n;
  }
}

VulkanBackend::WeightPart VulkanBackend::weight_whole(const Matrix& m) const {
  WeightPart whole{};
  int n = 0;
  for_each_part(m, [&](const WeightPart& part) { whole = part, ++n; });
  if (n != 1) fail("internal: a vector held in parts");
  // A view that starts inside a held row (a tensor group member's share of
  // gpt-oss's sinks): its values start that far into the row, F32 on both sides.
  const DeviceWeight& w = held_weight(m);
  const size_t within = static_cast<size_t>(m.data - w.host) % w.host_row_stride;
  if (within != 0 && w.type != DType::F32) fail("internal: a quantized vector viewed from inside a row");
  whole.offset += within;
  return whole;
}

void VulkanBackend::begin_step(const int32_t* seq_ids, const int32_t* positions, int n_tokens) {
  if (n_tokens > max_tokens_) fail("internal: a step of {} rows exceeds the {} it was sized for", n_tokens, max_tokens_);
  const size_t bytes = static_cast<size_t>(n_tokens) * sizeof(int32_t);
  upload(DevicePtr{rows_.get(), 0}, seq_ids, bytes);
  upload(DevicePtr{rows_.get(), static_cast<size_t>(max_tokens_) * sizeof(int32_t)}, positions, bytes);
  step_positions_.assign(positions, positions + n_tokens);
  step_seqs_ = {0, 0};
  if (n_tokens > 0)
    step_seqs_ = {static_cast<size_t>(*std::min_element(seq_ids, seq_ids + n_tokens)),
                  static_cast<size_t>(*std::max_element(seq_ids, seq_ids + n_tokens)) + 1};
  ++counters_.steps;
  step_rope_tables_.clear();
  step_tokens_ = n_tokens;
  in_step_ = true;
}

void VulkanBackend::finish_step() {
  in_step_ = false;
  flush();
}

void VulkanBackend::abandon_step() {
  in_step_ = false;
  forget_recorded();
}

BufferRange VulkanBackend::step_rows() const {
  return {rows_->handle(), 0, 2 * static_cast<size_t>(max_tokens_) * sizeof(int32_t)};
}

BufferRange VulkanBackend::step_cache(DevicePtr base, size_t seq_stride) const {
  return range(base.bytes(step_seqs_[0] * seq_stride), (step_seqs_[1] - step_seqs_[0]) * seq_stride);
}

void VulkanBackend::check_step(int n_tokens) const {
  if (n_tokens > step_tokens_) fail("internal: {} rows need positions but the step has {}", n_tokens, step_tokens_);
}

VulkanBackend::RowGrid VulkanBackend::row_grid(int64_t rows, int64_t group_rows) const {
  const uint32_t groups = u32((rows + group_rows - 1) / group_rows), gx = std::min(groups, max_groups_[0]);
  return {gx, (groups + gx - 1) / gx};
}

void VulkanBackend::matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) {
  for_each_part(w, [&](const WeightPart& part) {
    const DevicePtr y_part = y + part.first_row;  // y's rows stay w.rows apart
    const uint32_t push[] = {u32(part.rows), u32(w.cols), u32(n_tokens), u32(part.offset), u32(part.row_stride),
                             floats(x), floats(y_part), u32(w.rows)};
    // One token takes the MATVEC build; more, 8 tokens a workgroup or, tiled, 32.
    const bool one_token = n_tokens == 1, tiled = !one_token && tiled_matmul_;
    const int64_t group_rows = one_token ? kMatvecGroupRows : tiled ? kTiledGroupRows : kMatmulGroupRows;
    const int group_tokens = tiled ? kTiledGroupTokens : 8;
    const RowGrid g = row_grid(part.rows, group_rows);
    const size_t t = static_cast<size_t>(part.type);
    const int token_groups = (n_tokens + group_tokens - 1) / group_tokens;
    dispatch(one_token ? matvec_shader_[t] : tiled ? tiled_shader_[t] : matmul_shader_[t],
             {part.buffer, vk_buffer(x), vk_buffer(y)}, push, sizeof(push), g.x, u32(token_groups), g.z,
             {{part.buffer, part.offset, part.offset + part.rows * part.row_stride},
              range(x, rows_bytes(n_tokens, w.cols))},
             {range(y_part, rows_bytes(n_tokens - 1, w.rows) + part.rows * sizeof(float))},
             // Every workgroup's tile of tokens streams the part's rows.
             {one_token ? KernelClass::Matvec : KernelClass::Matmul,
              static_cast<double>(part.rows) * part.row_stride * token_groups + rows_bytes(n_tokens, w.cols),
              static_cast<double>(rows_bytes(n_tokens, part.rows)), 2.0 * part.rows * w.cols * n_tokens});
  });
}

void VulkanBackend::route_experts(DevicePtr logits, int n_tokens, int n_expert, int k, float scale, DevicePtr experts,
                                 DevicePtr weights) {
  if (k < 1 || k > 64 || k > n_expert) fail("Vulkan: routing to {} of {} experts (1 to 64 supported)", k, n_expert);
  struct {
    uint32_t n_tokens, n_expert, k, logits_off, experts_off, weights_off;
    float scale;
  } push{u32(n_tokens), u32(n_expert), u32(k), floats(logits), floats(experts), floats(weights), scale};
  const size_t slots = static_cast<size_t>(n_tokens) * k;
  dispatch(fixed_shaders_[kRoute], {vk_buffer(logits), vk_buffer(experts), vk_buffer(weights)}, &push, sizeof(push),
           u32((n_tokens + 63) / 64), 1, 1, {range(logits, rows_bytes(n_tokens, n_expert))},
           {range(experts, slots * sizeof(int32_t)), range(weights, slots * sizeof(float))},
           {KernelClass::Routing, static_cast<double>(rows_bytes(n_tokens, n_expert)), 8.0 * slots,
            4.0 * n_tokens * n_expert});
}

void VulkanBackend::matmul_routed(const Matrix& stacked, int64_t expert_rows, DevicePtr x, int x_share,
                                  DevicePtr experts, DevicePtr y, int n_slots) {
  // A slot is a workgroup row in y: more slots than the device's y limit go
  // in runs of whole tokens (x_share slots each).
  const int run = std::max(1, static_cast<int>(max_groups_[1]) / x_share) * x_share;
  for (int s0 = 0; s0 < n_slots; s0 += run) {
    const int n = std::min(run, n_slots - s0);
    const DevicePtr xs = x + static_cast<int64_t>(s0 / x_share) * stacked.cols, ys = y + s0 * expert_rows,
                    es = experts + s0;
    for_each_part(stacked, [&](const WeightPart& part) {
      // Parts hold whole experts (prepare_matrix's slice_rows).
      const uint32_t push[] = {u32(expert_rows), u32(stacked.cols), u32(n), u32(part.offset),
                               u32(part.row_stride), floats(xs), floats(ys), u32(expert_rows),
                               floats(es), u32(part.first_row / expert_rows), u32(part.rows / expert_rows),
                               u32(x_share)};
      const RowGrid g = row_grid(expert_rows, kMatvecGroupRows);
      dispatch(routed_shader_[static_cast<size_t>(part.type)],
               {part.buffer, vk_buffer(xs), vk_buffer(ys), vk_buffer(es)}, push, sizeof(push), g.x, u32(n), g.z,
               {{part.buffer, part.offset, part.offset + part.rows * part.row_stride},
                range(xs, rows_bytes((n + x_share - 1) / x_share, stacked.cols)),
                range(es, static_cast<size_t>(n) * sizeof(int32_t))},
               {range(ys, rows_bytes(n, expert_rows))},
               // Each slot's workgroups stream its expert's rows.
               {n <= x_share ? KernelClass::Matvec : KernelClass::Matmul,
                static_cast<double>(n) * expert_rows * part.row_stride +
                    rows_bytes((n + x_share - 1) / x_share, stacked.cols),
                static_cast<double>(rows_bytes(n, expert_rows)), 2.0 * n * expert_rows * stacked.cols});
    });
  }
}

void VulkanBackend::weighted_sum(DevicePtr rows, DevicePtr weights, int n_tokens, int k, int width, DevicePtr out) {
  const uint64_t n = static_cast<uint64_t>(n_tokens) * width;
  if (n == 0) return;
  const FlatGrid g = flat_grid(n);
  struct {
    uint32_t n_tokens, k, width, rows_off, weights_off, o_off, groups_x;
  } push{u32(n_tokens), u32(k), u32(width), floats(rows), floats(weights), floats(out), g.x};
  dispatch(fixed_shaders_[kWeightedSum], {vk_buffer(rows), vk_buffer(weights), vk_buffer(out)}, &push, sizeof(push),
           g.x, g.y, 1,
           {range(rows, rows_bytes(n_tokens * k, width)), range(weights, static_cast<size_t>(n_tokens) * k * sizeof(float))},
           {range(out, rows_bytes(n_tokens, width))},
           {KernelClass::Routing, static_cast<double>(rows_bytes(n_tokens * k, width)),
            static_cast<double>(rows_bytes(n_tokens, width)), 2.0 * n_tokens * k * width});
}

void VulkanBackend::rmsnorm(DevicePtr x, const Matrix& weight_matrix, DevicePtr y, int n_tokens, int n, float eps) {
  // No weight (OptionalOp::PlainNorm): x's buffer stands in, never read as one.
  const bool plain = weight_matrix.empty();
  const WeightPart wp = plain ? WeightPart{vk_buffer(x), 0} : weight_whole(weight_matrix);
  struct {
    uint32_t n, x_off, w_off, y_off;
    float eps;
    uint32_t rows;
  } push{u32(n), floats(x), plain ? 0xffffffffu : u32(wp.offset / 4), floats(y), eps, u32(n_tokens)};
  const uint32_t gx = std::min<uint32_t>(n_tokens, 65535), gy = (n_tokens + 65534) / 65535;
  const BufferRange weight_read = plain ? range(x, rows_bytes(n_tokens, n))
                                        : BufferRange{wp.buffer, wp.offset, wp.offset + n * sizeof(float)};
  dispatch(fixed_shaders_[kRmsnorm], {vk_buffer(x), wp.buffer, vk_buffer(y)}, &push, sizeof(push), gx, gy, 1,
           {range(x, rows_bytes(n_tokens, n)), weight_read},
           {range(y, rows_bytes(n_tokens, n))},
           {KernelClass::Norm, static_cast<double>(rows_bytes(n_tokens + 1, n)),
            static_cast<double>(rows_bytes(n_tokens, n)), 4.0 * n_tokens * n});
}

void VulkanBackend::rope(DevicePtr x, int n_tokens, int n_heads, const RopeParams& p) {
  check_step(n_tokens);
  const int half = p.rope_dim / 2;
  if (half > kMaxRopePairs) fail("the Vulkan backend rotates at most {} pairs per head, not {}", kMaxRopePairs, half);
  const RopeTable* table = nullptr;
  for (const RopeTable& t : step_rope_tables_)
    if (t.freq_base == p.freq_base && t.freq_scale == p.freq_scale && t.rope_dim == p.rope_dim &&
        t.factors == p.freq_factors && t.yarn == p.yarn)
      table = &t;
  if (!table) {
    if (step_rope_tables_.size() == kRopeTables) fail("internal: more than {} rope settings in one step", kRopeTables);
    // The CPU backend's cos and sin (backend/rope_angles.h), for the step's rows.
    const RopeAngles angles(p);
    rope_scratch_.resize(static_cast<size_t>(step_tokens_) * half * 2);
    for (int i = 0; i < half; ++i)
      for (int t = 0; t < step_tokens_; ++t) {
        float* pair = &rope_scratch_[(static_cast<size_t>(t) * half + i) * 2];
        angles.at(step_positions_[t], i, pair, pair + 1);
      }
    const size_t offset = step_rope_tables_.size() * rope_table_bytes(max_tokens_);
    upload(DevicePtr{rope_tables_.get(), offset}, rope_scratch_.data(), rope_scratch_.size() * sizeof(float));
    step_rope_tables_.push_back({p.freq_base, p.freq_scale, p.rope_dim, p.freq_factors, p.yarn, offset});
    table = &step_rope_tables_.back();
  }
  const uint32_t push[] = {u32(n_heads), u32(p.head_dim), u32(p.rope_dim), p.neox ? 1u : 0u, floats(x),
                           u32(table->offset / sizeof(float)), u32(p.rope_offset)};
  const BufferRange rows = range(x, rows_bytes(n_tokens, static_cast<int64_t>(n_heads) * p.head_dim));
  dispatch(fixed_shaders_[kRope], {vk_buffer(x), rope_tables_->handle()}, push, sizeof(push), u32((half + 63) / 64),
           u32(n_heads), u32(n_tokens),
           {rows, range({rope_tables_.get(), table->offset}, static_cast<size_t>(step_tokens_) * half * 2 * sizeof(float))},
           {rows},
           {KernelClass::Rope, 4.0 * n_tokens * half * (2.0 * n_heads + 2), 8.0 * n_tokens * half * n_heads,
            6.0 * n_tokens * half * n_heads});
}

void VulkanBackend::kv_store(const KvLayer& kv, DevicePtr k, DevicePtr v, int n_tokens) {
  check_step(n_tokens);
  // Latent attention: V is the K row's latent, written with it.
  for (int part = 0; part < (kv.v_in_k ? 1 : 2); ++part) {
    const DevicePtr dst = part == 0 ? kv.k : kv.v;
    const size_t row_bytes = part == 0 ? kv.k_row_bytes : kv.v_row_bytes;
    // Rows of whole words (kv_row_stride pads them), each written word by word.
    if (row_bytes % 4 != 0 || dst.offset % 4 != 0)
      fail("internal: a Vulkan KV cache row of {} bytes at {}", row_bytes, dst.offset);
    const uint32_t push[] = {u32(kv.width),
                             kv_code(part == 0 ? kv.k_type : kv.v_type),
                             u32(dst.offset),
                             u32(row_bytes),
                             u32(part == 0 ? kv.k_seq_stride : kv.v_seq_stride),
                             u32(kv.ring),
                             floats(part == 0 ? k : v),
                             u32(max_tokens_)};
    dispatch(fixed_shaders_[kKvStore], {vk_buffer(part == 0 ? k : v), vk_buffer(dst), rows_->handle()}, push,
             sizeof(push), u32((row_bytes / 4 + 63) / 64), u32(n_tokens), 1,
             {range(part == 0 ? k : v, rows_bytes(n_tokens, kv.width)), step_rows()},
             {step_cache(dst, part == 0 ? kv.k_seq_stride : kv.v_seq_stride)},
             {KernelClass::KvStore, static_cast<double>(rows_bytes(n_tokens, kv.width)),
              static_cast<double>(n_tokens) * row_bytes, 0.0});
  }
}

void VulkanBackend::attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& s, DevicePtr out) {
  check_step(n_tokens);
  if (s.head_dim > 2048 || s.v_dim() > 512 || s.v_dim() > s.head_dim)
    fail("the Vulkan attention shader takes K heads of up to 2048 values and V heads of up to 512, not {} and {}",
         s.head_dim, s.v_dim());
  // A workgroup takes a block of the heads that share a KV head (the most
  // up to 8 that divide the group and fit 2048 query values), reading K
  // and V once for them.
  const int group = s.n_head / s.n_head_kv;
  int block = 1;
  for (int b = std::min(group, 8); b > 1; --b)
    if (group % b == 0 && b * s.head_dim <= 2048) {
      block = b;
      break;
    }
  // Tokens of one sequence without a window share a workgroup too (their
  // chunks all count from position 0), up to 8 rows of token and head.
  const bool one_sequence = step_seqs_[1] - step_seqs_[0] == 1;
  const int tile = s.window == 0 && one_sequence ? std::max(1, std::min(8 / block, 2048 / (block * s.head_dim))) : 1;
  struct {
    uint32_t n_head, n_head_kv, head_dim, window, q_off, o_off, k_off, v_off;
    uint32_t k_row_bytes, v_row_bytes, k_seq_stride, v_seq_stride, ring, k_type, v_type, pos_off;
    float scale;
    uint32_t block_heads, tile_tokens, n_tokens, has_sinks, sinks_off, v_dim;
    uint32_t split, n_splits, part_off;
  } push{u32(s.n_head), u32(s.n_head_kv), u32(s.head_dim), u32(s.window), floats(q), floats(out), u32(kv.k.offset),
         u32(kv.v.offset), u32(kv.k_row_bytes), u32(kv.v_row_bytes), u32(kv.k_seq_stride), u32(kv.v_seq_stride),
         u32(kv.ring), kv_code(kv.k_type), kv_code(kv.v_type), u32(max_tokens_), s.scale, u32(block), u32(tile),
         u32(n_tokens), s.sinks ? 1u : 0u, 0u, u32(s.v_dim()), 0u, 1u, 0u};
  // gpt-oss's sinks: a logit per query head, read where the weights hold it.
  BufferRange sinks{dummy_->handle(), 0, 0};
  if (s.sinks) {
    const WeightPart wp = weight_whole(*s.sinks);
    push.sinks_off = u32(wp.offset / 4);
    sinks = {wp.buffer, wp.offset, wp.offset + static_cast<size_t>(s.n_head) * sizeof(float)};
  }
  const int64_t width = static_cast<int64_t>(s.n_head) * s.head_dim, out_width = static_cast<int64_t>(s.n_head) * s.v_dim();
  // What it reads: each workgroup (a block of heads, a tile of tokens)
  // reads its KV head's visible rows once; each row costs q.k and the
  // weighted V for every head.
  double visible = 0;
  for (int t = 0; t < n_tokens; ++t)
    visible += s.window > 0 ? std::min(step_positions_[t] + 1, s.window) : step_positions_[t] + 1;
  const double kv_head_bytes = static_cast<double>(kv.k_row_bytes) / kv.width * s.head_dim +
                               (kv.v_in_k ? 0.0 : static_cast<double>(kv.v_row_bytes) / kv.width * s.v_dim());
  const Traffic traffic{KernelClass::Attention,
                        visible / tile * s.n_head / block * kv_head_bytes + rows_bytes(n_tokens, width),
                        static_cast<double>(rows_bytes(n_tokens, out_width)),
                        visible * s.n_head * 2.0 * (s.head_dim + s.v_dim())};
  // A few tokens over a long context (decode): each split of
  // kAttentionSplit positions on its own workgroups, then a pass that
  // merges them in order (the bits a workgroup walking them all gives).
  int span = 0;
  for (int t = 0; t < n_tokens; ++t)
    span = std::max(span, s.window > 0 ? std::min(step_positions_[t] + 1, s.window) : step_positions_[t] + 1);
  const int n_splits = (span + kAttentionSplit - 1) / kAttentionSplit;
  const size_t part_bytes = static_cast<size_t>(n_tokens) * s.n_head * n_splits * (s.v_dim() + 2) * sizeof(float);
  const bool split = n_tokens <= kAttentionSplitTokens && n_splits >= 2 && n_splits <= kAttentionMaxSplits;
  if (split && !attention_parts_) attention_parts_ = make_buffer(kAttentionPartsBytes, false);
  if (split && part_bytes <= attention_parts_->bytes()) {
    push.split = 1;
    push.n_splits = u32(n_splits);
    const BufferRange parts{attention_parts_->handle(), 0, part_bytes};
    dispatch(fixed_shaders_[kAttention],
             {vk_buffer(q), vk_buffer(kv.k), vk_buffer(kv.v), rows_->handle(), vk_buffer(out), sinks.buffer,
              attention_parts_->handle()},
             &push, sizeof(push), u32(s.n_head / block), u32((n_tokens + tile - 1) / tile), u32(n_splits),
             {range(q, rows_bytes(n_tokens, width)), step_cache(kv.k, kv.k_seq_stride),
              step_cache(kv.v, kv.v_seq_stride), step_rows(), sinks},
             {parts}, traffic);
    const uint32_t combine[] = {u32(s.n_head), u32(s.v_dim()), u32(n_splits), 0u, floats(out), s.sinks ? 1u : 0u,
                                push.sinks_off};
    dispatch(fixed_shaders_[kAttentionCombine], {attention_parts_->handle(), vk_buffer(out), sinks.buffer}, combine,
             sizeof(combine), u32(n_tokens * s.n_head), 1, 1, {parts, sinks},
             {range(out, rows_bytes(n_tokens, out_width))},
             {KernelClass::Attention, static_cast<double>(part_bytes), static_cast<double>(rows_bytes(n_tokens, out_width)),
              3.0 * n_tokens * s.n_head * n_splits * (s.v_dim() + 2)});
    return;
  }
  dispatch(fixed_shaders_[kAttention],
           {vk_buffer(q), vk_buffer(kv.k), vk_buffer(kv.v), rows_->handle(), vk_buffer(out), sinks.buffer,
            dummy_->handle()},
           &push, sizeof(push), u32(s.n_head / block), u32((n_tokens + tile - 1) / tile), 1,
           {range(q, rows_bytes(n_tokens, width)), step_cache(kv.k, kv.k_seq_stride), step_cache(kv.v, kv.v_seq_stride),
            step_rows(), sinks},
           {range(out, rows_bytes(n_tokens, out_width))}, traffic);
}

void VulkanBackend::delta_net(DevicePtr qkv, DevicePtr alpha, DevicePtr beta, const RecurrentLayer& state,
                              const DeltaNetParams& p, int n_tokens, DevicePtr out) {
  check_step(n_tokens);
  if (p.head_dim > 512) fail("the Vulkan DeltaNet shader takes heads of up to 512 values, not {}", p.head_dim);
  const int width = p.conv_width();
  const WeightPart taps = weight_whole(*p.conv), dt = weight_whole(*p.dt_bias), a = weight_whole(*p.a);
  const BufferRange rows = range(qkv, rows_bytes(n_tokens, width));
  const BufferRange conv = step_cache(state.conv, state.conv_seq_stride), ssm = step_cache(state.ssm, state.ssm_seq_stride);
  const BufferRange taps_range{taps.buffer, taps.offset, taps.offset + static_cast<size_t>(width) * p.conv_kernel * 4};
  const uint32_t conv_push[] = {u32(width), u32(p.conv_kernel), u32(n_tokens), floats(qkv), u32(taps.offset / 4),
                                floats(state.conv), u32(state.conv_seq_stride / 4), u32(max_tokens_)};
  dispatch(fixed_shaders_[kDeltaConv], {vk_buffer(qkv), taps.buffer, vk_buffer(state.conv), rows_->handle()}, conv_push,
           sizeof(conv_push), u32((width + 63) / 64), 1, 1, {rows, taps_range, conv, step_rows()}, {rows, conv},
           {KernelClass::Recurrence, static_cast<double>(rows_bytes(n_tokens, width)) + (taps_range.end - taps_range.begin),
            static_cast<double>(rows_bytes(n_tokens, width)), 2.0 * n_tokens * width * (p.conv_kernel + 2)});
  struct {
    uint32_t width, head_dim, key_width, qkv_off;
    float eps;
  } norm_push{u32(width), u32(p.head_dim), u32(p.key_width()), floats(qkv), p.eps};
  dispatch(fixed_shaders_[kDeltaNorm], {vk_buffer(qkv)}, &norm_push, sizeof(norm_push), u32(2 * p.n_k_heads),
           u32(n_tokens), 1, {rows}, {rows},
           {KernelClass::Recurrence, static_cast<double>(rows_bytes(n_tokens, 2 * p.key_width())),
            static_cast<double>(rows_bytes(n_tokens, 2 * p.key_width())), 3.0 * n_tokens * 2 * p.key_width()});
  struct {
    uint32_t head_dim, n_k, n_v, keys_interleaved, n_tokens, width, value_width, qkv_off, alpha_off, beta_off, dt_off,
        a_off, ssm_off, ssm_seq_stride, out_off, pos_off;
    float scale;
  } rule_push{u32(p.head_dim), u32(p.n_k_heads), u32(p.n_v_heads), p.keys_interleaved ? 1u : 0u, u32(n_tokens),
              u32(width), u32(p.value_width()), floats(qkv), floats(alpha), floats(beta), u32(dt.offset / 4),
              u32(a.offset / 4), floats(state.ssm), u32(state.ssm_seq_stride / 4), floats(out), u32(max_tokens_),
              1.0f / std::sqrt(static_cast<float>(p.head_dim))};
  const size_t heads = static_cast<size_t>(p.n_v_heads) * sizeof(float);
  dispatch(fixed_shaders_[kDeltaRule],
           {vk_buffer(qkv), vk_buffer(alpha), vk_buffer(beta), dt.buffer, a.buffer, vk_buffer(state.ssm),
            rows_->handle(), vk_buffer(out)},
           &rule_push, sizeof(rule_push), u32(p.n_v_heads), 1, 1,
           {rows, range(alpha, rows_bytes(n_tokens, p.n_v_heads)), range(beta, rows_bytes(n_tokens, p.n_v_heads)),
            {dt.buffer, dt.offset, dt.offset + heads}, {a.buffer, a.offset, a.offset + heads}, ssm, step_rows()},
           {ssm, range(out, rows_bytes(n_tokens, p.value_width()))},
           // Each row walks its head's state twice (decay and read, write and read).
           {KernelClass::Recurrence,
            n_tokens * (2.0 * p.n_v_heads * p.head_dim * p.head_dim * 4 + 4.0 * (2 * p.key_width() + p.value_width())),
            n_tokens * (2.0 * p.n_v_heads * p.head_dim * p.head_dim * 4 + 4.0 * p.value_width()),
            n_tokens * 6.0 * p.n_v_heads * p.head_dim * p.head_dim});
}

void VulkanBackend::elementwise(uint32_t op, DevicePtr a, VkBuffer b, size_t b_offset, DevicePtr out, int64_t n,
                                float param, uint32_t period) {
  if (n <= 0) return;
  const FlatGrid g = flat_grid(static_cast<uint64_t>(n));
  struct {
    uint32_t op, n, a_off, b_off, o_off, b_period, groups_x;
    float param;
  } push{op, u32(n), floats(a), u32(b_offset / 4), floats(out), period, g.x, param};
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const VkBuffer bb = b ? b : dummy_->handle();
  const BufferRange b_read{bb, b ? b_offset : 0, b ? b_offset + (period > 1 ? period * sizeof(float) : bytes) : 0};
  dispatch(fixed_shaders_[kElementwise], {vk_buffer(a), bb, vk_buffer(out)}, &push, sizeof(push), g.x, g.y, 1,
           {range(a, bytes), b_read}, {range(out, bytes)},
           {KernelClass::Elementwise, static_cast<double>(bytes + (b_read.end - b_read.begin)), static_cast<double>(bytes),
            4.0 * n});
}


void VulkanBackend::swiglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) {
  elementwise(ELEMENTWISE_SWIGLU, gate, vk_buffer(up), up.offset, out, n, 0.0f, 1);
}
void VulkanBackend::geglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) {
  elementwise(ELEMENTWISE_GEGLU, gate, vk_buffer(up), up.offset, out, n, 0.0f, 1);
}
void VulkanBackend::copy_rows(DevicePtr dst, int64_t dst_stride, DevicePtr src, int64_t src_stride, int64_t width,
                              int64_t n_rows) {
  if (width <= 0 || n_rows <= 0) return;
  const size_t src_bytes = static_cast<size_t>((n_rows - 1) * src_stride + width) * sizeof(float);
  const size_t dst_bytes = static_cast<size_t>((n_rows - 1) * dst_stride + width) * sizeof(float);
  check_range(src, src_bytes, "copy_rows");
  check_range(dst, dst_bytes, "copy_rows");
  const BufferRange from = range(src, src_bytes), to = range(dst, dst_bytes);
  // Between steps, or rows that overlap: a copy command a row (each checked).
  if (!in_step_ || from.overlaps(to)) return Backend::copy_rows(dst, dst_stride, src, src_stride, width, n_rows);
  const uint64_t n = static_cast<uint64_t>(width) * n_rows;
  const FlatGrid g = flat_grid(n);
  const uint32_t push[] = {u32(width), u32(n_rows), floats(src), u32(src_stride), floats(dst), u32(dst_stride), g.x};
  dispatch(fixed_shaders_[kCopyRows], {vk_buffer(src), vk_buffer(dst)}, push, sizeof(push), g.x, g.y, 1, {from}, {to},
           {KernelClass::Copy, 4.0 * n, 4.0 * n, 0.0});
}

void VulkanBackend::swiglu_oai(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) {
  elementwise(ELEMENTWISE_SWIGLU_OAI, gate, vk_buffer(up), up.offset, out, n, 0.0f, 1);
}
void VulkanBackend::sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) {
  elementwise(ELEMENTWISE_SIGMOID_MUL, x, vk_buffer(gate), gate.offset, x, n, 0.0f, 1);
}
void VulkanBackend::scale(DevicePtr x, float s, int64_t n) {
  elementwise(ELEMENTWISE_SCALE, x, VK_NULL_HANDLE, 0, x, n, s, 1);
}
void VulkanBackend::softcap(DevicePtr x, float cap, int64_t n) {
  elementwise(ELEMENTWISE_SOFTCAP, x, VK_NULL_HANDLE, 0, x, n, cap, 1);
}
void VulkanBackend::add(DevicePtr y, DevicePtr x, int64_t n) {
  elementwise(ELEMENTWISE_ADD, y, vk_buffer(x), x.offset, y, n, 0.0f, 1);
}

void VulkanBackend::add_bias(DevicePtr y, const Matrix& bias, int n_tokens, int n) {
  const WeightPart wp = weight_whole(bias);
  elementwise(ELEMENTWISE_ADD_BIAS, y, wp.buffer, wp.offset, y, static_cast<int64_t>(n_tokens) * n, 0.0f,
              u32(n));
}

void VulkanBackend::get_rows(const Matrix& w, const int32_t* ids, int n, DevicePtr out) {
  if (n <= 0) return;
  if (n > max_tokens_) fail("internal: {} embedding rows exceed the {} the step was sized for", n, max_tokens_);
  check_row_ids(w, ids, n);
  upload(DevicePtr{lookup_ids_.get(), 0}, ids, static_cast<size_t>(n) * sizeof(int32_t));
  const uint32_t chunks = u32((w.cols + 31) / 32);
  for_each_part(w, [&](const WeightPart& part) {
    // Each part writes the rows whose ids fall in it.
    const uint32_t push[] = {u32(w.cols), u32(part.offset), u32(part.row_stride), floats(out), u32(part.first_row),
                             u32(part.rows)};
    dispatch(get_rows_shader_[static_cast<size_t>(part.type)], {part.buffer, lookup_ids_->handle(), vk_buffer(out)},
             push, sizeof(push), (chunks + 63) / 64, u32(n), 1,
             {{part.buffer, part.offset, part.offset + part.rows * part.row_stride},
              {lookup_ids_->handle(), 0, n * sizeof(int32_t)}},
             {range(out, rows_bytes(n, w.cols))},
             {KernelClass::Embedding, static_cast<double>(n) * part.row_stride, static_cast<double>(rows_bytes(n, w.cols)),
              static_cast<double>(n) * w.cols});
  });
  if (!in_step_) flush();
}

std::unique_ptr<Backend> make_vulkan_backend(int index, int max_tokens) {
  return std::make_unique<VulkanBackend>(index, max_tokens);
}

}  // namespace shoal
