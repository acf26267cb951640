#pragma once
// A step's work on a Vulkan device as one submission, recorded once and
// replayed. The ops append commands (a dispatch, or a copy), each naming the
// byte ranges it reads and writes; submit() turns the list into one command
// buffer with a barrier only before a command that reads or writes what a
// command since the last barrier wrote, or writes what one read (a true
// dependency), and one at the end for the host and the next submission.
//
// A list equal to one submitted before — a decode step: the same shapes,
// buffers and push constants, the positions living in device memory —
// replays that plan's command buffer: no recording, no descriptor writes, no
// allocation on the host or in the driver. Descriptor sets are made once per
// (pipeline, bound buffers) and kept until one of the buffers is freed.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/vulkan_api.h"

namespace shoal {

struct VulkanPipeline {
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t bindings = 0;
};

// Bytes [begin, end) of a buffer.
struct BufferRange {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t begin = 0, end = 0;
  bool overlaps(const BufferRange& o) const { return buffer == o.buffer && begin < o.end && o.begin < end; }
};

struct VulkanCommand {
  static constexpr int kMaxBindings = 8, kMaxReads = 8, kMaxWrites = 2, kPushWords = 32;
  bool is_dispatch = true;
  bool barrier_before = false;  // decided as the command is added
  uint16_t pipeline = 0;
  uint8_t n_bindings = 0, n_reads = 0, n_writes = 0;
  VkBuffer bindings[kMaxBindings] = {};
  uint32_t groups[3] = {};
  uint32_t push_words = 0;
  uint32_t push[kPushWords] = {};
  VkBuffer copy_src = VK_NULL_HANDLE, copy_dst = VK_NULL_HANDLE;
  VkBufferCopy region{};
  // Not part of a plan's identity: ranges vary with the positions, the
  // barriers they imply are compared instead.
  BufferRange reads[kMaxReads], writes[kMaxWrites];

  bool same_work(const VulkanCommand& o) const;  // everything but the ranges
  bool uses(VkBuffer b) const;
};

class VulkanRecorder {
 public:
  VulkanRecorder(VkDevice device, VkQueue queue, uint32_t queue_family, const std::vector<VulkanPipeline>& pipelines,
                 DeviceCounters& counters);
  ~VulkanRecorder();
  VulkanRecorder(const VulkanRecorder&) = delete;
  VulkanRecorder& operator=(const VulkanRecorder&) = delete;

  // Adds a command; its barrier is decided here from its ranges.
  void add(VulkanCommand c);
  bool empty() const { return step_.empty(); }
  size_t size() const { return step_.size(); }
  bool uses(VkBuffer b) const;
  // Submits the step's commands as one command buffer and waits for it.
  void submit_and_wait();
  // Drops the commands added since the last submission.
  void drop();
  // A buffer is about to be freed: plans and descriptor sets naming it go.
  void forget_buffer(VkBuffer b);
  // The commands of the last submission (the tests check its barriers).
  std::span<const VulkanCommand> last_submitted() const { return last_; }

 private:
  struct Plan {
    std::vector<VulkanCommand> commands;
    VkCommandBuffer commands_buffer = VK_NULL_HANDLE;
    uint64_t used = 0;
    uint32_t dispatches = 0, copies = 0, barriers = 0;
  };
  struct SetKey {
    uint16_t pipeline;
    VkBuffer bindings[VulkanCommand::kMaxBindings];
    auto operator<=>(const SetKey&) const = default;
  };

  Plan& plan_for_step();
  void record(Plan& plan);
  VkDescriptorSet descriptor_set(const VulkanCommand& c);
  void barrier(VkCommandBuffer cb) const;

  VkDevice device_;
  VkQueue queue_;
  const std::vector<VulkanPipeline>& pipelines_;
  DeviceCounters& counters_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  struct OwnedSet {
    VkDescriptorSet set;
    VkDescriptorPool pool;
  };
  std::vector<VkDescriptorPool> descriptor_pools_;
  std::map<SetKey, OwnedSet> sets_;
  std::vector<VulkanCommand> step_, last_;
  std::vector<BufferRange> pending_reads_, pending_writes_;  // since the last barrier
  std::vector<std::unique_ptr<Plan>> plans_;
  uint64_t clock_ = 0;
};

}  // namespace shoal
