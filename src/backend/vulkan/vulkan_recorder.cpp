#include "backend/vulkan/vulkan_recorder.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace shoal {

namespace {
constexpr uint32_t kSetsPerPool = 256;
constexpr size_t kMaxPlans = 16;   // a decode step, a few prompt batch sizes, the head, tests
constexpr size_t kStepCommands = 4096;
}  // namespace

bool VulkanCommand::same_work(const VulkanCommand& o) const {
  if (is_dispatch != o.is_dispatch || barrier_before != o.barrier_before) return false;
  if (!is_dispatch)
    return copy_src == o.copy_src && copy_dst == o.copy_dst && region.srcOffset == o.region.srcOffset &&
           region.dstOffset == o.region.dstOffset && region.size == o.region.size;
  return pipeline == o.pipeline && n_bindings == o.n_bindings &&
         std::equal(bindings, bindings + n_bindings, o.bindings) && std::equal(groups, groups + 3, o.groups) &&
         push_words == o.push_words && std::equal(push, push + push_words, o.push);
}

bool VulkanCommand::uses(VkBuffer b) const {
  if (!is_dispatch) return copy_src == b || copy_dst == b;
  return std::find(bindings, bindings + n_bindings, b) != bindings + n_bindings;
}

VulkanRecorder::VulkanRecorder(VkDevice device, VkQueue queue, uint32_t queue_family,
                               const std::vector<VulkanPipeline>& pipelines, DeviceCounters& counters)
    : device_(device), queue_(queue), pipelines_(pipelines), counters_(counters) {
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = queue_family;
  vk::check(vk::vkCreateCommandPool(device_, &pool_info, nullptr, &pool_), "vkCreateCommandPool");
  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  const VkResult r = vk::vkCreateFence(device_, &fence_info, nullptr, &fence_);
  if (r != VK_SUCCESS) {
    vk::vkDestroyCommandPool(device_, pool_, nullptr);
    vk::check(r, "vkCreateFence");
  }
  step_.reserve(kStepCommands);
  last_.reserve(kStepCommands);
  pending_reads_.reserve(256);
  pending_writes_.reserve(256);
}

VulkanRecorder::~VulkanRecorder() {
  vk::vkDeviceWaitIdle(device_);
  for (VkDescriptorPool p : descriptor_pools_) vk::vkDestroyDescriptorPool(device_, p, nullptr);
  vk::vkDestroyFence(device_, fence_, nullptr);
  vk::vkDestroyCommandPool(device_, pool_, nullptr);  // frees the plans' command buffers
}

void VulkanRecorder::add(VulkanCommand c) {
  bool conflict = false;
  for (int i = 0; i < c.n_reads && !conflict; ++i)
    for (const BufferRange& w : pending_writes_)
      if (w.overlaps(c.reads[i])) conflict = true;
  for (int i = 0; i < c.n_writes && !conflict; ++i) {
    for (const BufferRange& w : pending_writes_)
      if (w.overlaps(c.writes[i])) conflict = true;
    for (const BufferRange& r : pending_reads_)
      if (r.overlaps(c.writes[i])) conflict = true;
  }
  if (conflict) {
    pending_reads_.clear();
    pending_writes_.clear();
  }
  c.barrier_before = conflict;
  pending_reads_.insert(pending_reads_.end(), c.reads, c.reads + c.n_reads);
  pending_writes_.insert(pending_writes_.end(), c.writes, c.writes + c.n_writes);
  step_.push_back(c);
}

bool VulkanRecorder::uses(VkBuffer b) const {
  return std::any_of(step_.begin(), step_.end(), [&](const VulkanCommand& c) { return c.uses(b); });
}

void VulkanRecorder::drop() {
  step_.clear();
  pending_reads_.clear();
  pending_writes_.clear();
}

VulkanRecorder::Plan& VulkanRecorder::plan_for_step() {
  for (auto& p : plans_)
    if (p->commands.size() == step_.size() &&
        std::equal(step_.begin(), step_.end(), p->commands.begin(),
                   [](const VulkanCommand& a, const VulkanCommand& b) { return a.same_work(b); })) {
      ++counters_.plans_replayed;
      return *p;
    }
  // A new plan, in a fresh command buffer or in the least recently used one's.
  Plan* plan = nullptr;
  if (plans_.size() < kMaxPlans) {
    plans_.push_back(std::make_unique<Plan>());
    plan = plans_.back().get();
    VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    alloc.commandPool = pool_;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    vk::check(vk::vkAllocateCommandBuffers(device_, &alloc, &plan->commands_buffer), "vkAllocateCommandBuffers");
  } else {
    plan = std::min_element(plans_.begin(), plans_.end(), [](auto& a, auto& b) { return a->used < b->used; })->get();
  }
  plan->commands = step_;
  try {
    record(*plan);
  } catch (...) {
    plan->commands.clear();  // never matches a step again
    throw;
  }
  ++counters_.plans_recorded;
  return *plan;
}

void VulkanRecorder::barrier(VkCommandBuffer cb) const {
  // Shader and transfer writes before it are visible to shaders, transfers
  // and the host after it (and, in submission order, to the next submission).
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                    VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
  vk::vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                               VK_PIPELINE_STAGE_HOST_BIT,
                           0, 1, &b, 0, nullptr, 0, nullptr);
}

void VulkanRecorder::record(Plan& plan) {
  VkCommandBuffer cb = plan.commands_buffer;
  vk::check(vk::vkResetCommandBuffer(cb, 0), "vkResetCommandBuffer");
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  vk::check(vk::vkBeginCommandBuffer(cb, &begin), "vkBeginCommandBuffer");
  plan.dispatches = plan.copies = 0;
  plan.barriers = 1;  // the closing one
  int bound = -1;
  for (const VulkanCommand& c : plan.commands) {
    if (c.barrier_before) {
      barrier(cb);
      ++plan.barriers;
    }
    if (!c.is_dispatch) {
      vk::vkCmdCopyBuffer(cb, c.copy_src, c.copy_dst, 1, &c.region);
      ++plan.copies;
      continue;
    }
    const VulkanPipeline& p = pipelines_[c.pipeline];
    if (bound != c.pipeline) vk::vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
    bound = c.pipeline;
    VkDescriptorSet set = descriptor_set(c);
    vk::vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
    vk::vkCmdPushConstants(cb, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, c.push_words * 4, c.push);
    vk::vkCmdDispatch(cb, c.groups[0], c.groups[1], c.groups[2]);
    ++plan.dispatches;
  }
  barrier(cb);
  vk::check(vk::vkEndCommandBuffer(cb), "vkEndCommandBuffer");
}

VkDescriptorSet VulkanRecorder::descriptor_set(const VulkanCommand& c) {
  SetKey key{c.pipeline, {}};
  std::copy(c.bindings, c.bindings + c.n_bindings, key.bindings);
  if (auto it = sets_.find(key); it != sets_.end()) return it->second.set;
  const VulkanPipeline& p = pipelines_[c.pipeline];
  if (c.n_bindings != p.bindings) fail("internal: a pipeline takes {} buffers, given {}", p.bindings, c.n_bindings);
  VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  alloc.descriptorSetCount = 1;
  alloc.pSetLayouts = &p.set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  VkResult r = VK_ERROR_OUT_OF_POOL_MEMORY;
  if (!descriptor_pools_.empty()) {
    alloc.descriptorPool = descriptor_pools_.back();
    r = vk::vkAllocateDescriptorSets(device_, &alloc, &set);
  }
  if (r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL) {  // the last pool is full: another
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * VulkanCommand::kMaxBindings};
    VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    info.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
    info.maxSets = kSetsPerPool;
    info.poolSizeCount = 1;
    info.pPoolSizes = &size;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    vk::check(vk::vkCreateDescriptorPool(device_, &info, nullptr, &pool), "vkCreateDescriptorPool");
    descriptor_pools_.push_back(pool);
    alloc.descriptorPool = pool;
    r = vk::vkAllocateDescriptorSets(device_, &alloc, &set);
  }
  vk::check(r, "vkAllocateDescriptorSets");
  ++counters_.descriptor_sets;
  VkDescriptorBufferInfo infos[VulkanCommand::kMaxBindings];
  VkWriteDescriptorSet writes[VulkanCommand::kMaxBindings];
  for (uint32_t i = 0; i < c.n_bindings; ++i) {
    infos[i] = {c.bindings[i], 0, VK_WHOLE_SIZE};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vk::vkUpdateDescriptorSets(device_, c.n_bindings, writes, 0, nullptr);
  sets_.emplace(key, OwnedSet{set, alloc.descriptorPool});
  return set;
}

void VulkanRecorder::submit_and_wait() {
  if (step_.empty()) return;
  struct Clear {  // the step is done or dropped, whatever happens below
    VulkanRecorder& r;
    ~Clear() {
      std::swap(r.step_, r.last_);
      r.drop();
    }
  } clear{*this};
  Plan& plan = plan_for_step();
  plan.used = ++clock_;
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &plan.commands_buffer;
  vk::check(vk::vkQueueSubmit(queue_, 1, &submit, fence_), "vkQueueSubmit");
  ++counters_.submissions;
  counters_.dispatches += plan.dispatches;
  counters_.copies += plan.copies;
  counters_.barriers += plan.barriers;
  const VkResult waited = vk::vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX);
  ++counters_.host_waits;
  vk::check(waited, "vkWaitForFences");
  vk::check(vk::vkResetFences(device_, 1, &fence_), "vkResetFences");
}

void VulkanRecorder::forget_buffer(VkBuffer b) {
  for (auto& p : plans_)
    if (std::any_of(p->commands.begin(), p->commands.end(), [&](const VulkanCommand& c) { return c.uses(b); }))
    {
      p->commands.clear();  // never matches again; its command buffer is the next new plan's
      p->used = 0;
    }
  for (auto it = sets_.begin(); it != sets_.end();) {
    const SetKey& k = it->first;
    if (std::find(std::begin(k.bindings), std::end(k.bindings), b) == std::end(k.bindings)) {
      ++it;
      continue;
    }
    vk::vkFreeDescriptorSets(device_, it->second.pool, 1, &it->second.set);
    it = sets_.erase(it);
  }
}

}  // namespace shoal
