#pragma once
// The Vulkan backend: one device, one queue. Weights are uploaded once
// (prepare_weights) and read by the matmul shaders straight in their GGUF
// blocks; activations, the KV cache and the step's positions live in device
// memory. A stage step's ops go to a VulkanRecorder (vulkan_recorder.h): one
// submission at the download that ends the step, barriers only at true
// dependencies, a decode step's command buffer replayed (earlier only where
// the 32 MiB staging area for uploads and downloads runs out). A mixture of
// experts routes on the device. Each shader fixes its reduction order, so the
// bits do not depend on the batch (docs/design.md); they differ from the CPU
// backend's within the tolerances the tests state.
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/driver_allocator.h"
#include "backend/vulkan/vulkan_api.h"
#include "backend/vulkan/vulkan_recorder.h"

namespace shoal {

class VulkanBuffer;

class VulkanBackend : public Backend {
 public:
  // Device `index` of list_vulkan_devices(); max_tokens sizes the step's
  // rows. Throws shoal::Error saying why when there is no such device.
  VulkanBackend(int index, int max_tokens);
  ~VulkanBackend() override;

  std::string name() const override { return name_; }
  BackendKind kind() const override { return BackendKind::Vulkan; }
  // Free device memory now (the budget extension's figure, or the heap
  // less what this backend holds).
  uint64_t free_memory() const override;
  size_t kv_row_stride(size_t row_bytes) const override { return (row_bytes + 3) & ~size_t{3}; }
  // Uploads one matrix (prepare_weights does this for a stage's range);
  // the ops then accept it and any whole-row slice of it.
  // slice_rows: a part boundary never cuts a slice (an expert).
  void prepare_matrix(const Matrix& m, int64_t slice_rows = 0);
  // The largest buffer a shader can bind (maxStorageBufferRange, under
  // 4 GiB: every offset a shader takes fits 32 bits).
  uint64_t max_buffer_bytes() const { return max_buffer_range_; }
  // The last submission's commands with their ranges and barriers.
  std::optional<DeviceCounters> device_counters() const override {
    DeviceCounters c = counters_;
    c.driver_allocations = driver_allocator_.count();
    return c;
  }
  std::span<const VulkanCommand> last_submission() const { return recorder_->last_submitted(); }

  std::unique_ptr<Buffer> allocate(size_t bytes) override;
  void upload(DevicePtr dst, const void* src, size_t bytes) override;
  void download(void* dst, DevicePtr src, size_t bytes) override;
  void copy(DevicePtr dst, DevicePtr src, size_t bytes) override;
  uint64_t prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) override;
  uint64_t prepared_bytes(std::span<const WeightToPrepare> weights) const override;
  void begin_step(const int32_t* seq_ids, const int32_t* positions, int n_tokens) override;
  void finish_step() override;
  void abandon_step() override;

  void matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) override;
  void rmsnorm(DevicePtr x, const Matrix& weight, DevicePtr y, int n_tokens, int n, float eps) override;
  void rope(DevicePtr x, int n_tokens, int n_heads, const RopeParams& p) override;
  void kv_store(const KvLayer& kv, DevicePtr k, DevicePtr v, int n_tokens) override;
  void attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& shape, DevicePtr out) override;
  // Qwen3.5's Gated DeltaNet: the convolution, the L2 norms and the
  // recurrence, three dispatches (shaders/delta_*.comp).
  void delta_net(DevicePtr qkv, DevicePtr alpha, DevicePtr beta, const RecurrentLayer& state, const DeltaNetParams& p,
                 int n_tokens, DevicePtr out) override;
  bool runs(OptionalOp op) const override {
    return op == OptionalOp::DeltaNet || op == OptionalOp::AttentionSinks || op == OptionalOp::SwigluOai ||
           op == OptionalOp::LatentAttention || op == OptionalOp::PlainNorm || Backend::runs(op);
  }
  void swiglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override;
  // Strided rows in one dispatch (not a copy command a row), inside a step.
  void copy_rows(DevicePtr dst, int64_t dst_stride, DevicePtr src, int64_t src_stride, int64_t width,
                 int64_t n_rows) override;
  // x *= sigmoid(gate): Qwen3.5's attention output gate, on the device.
  void sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n) override;
  // gpt-oss's clamped SwiGLU, on the device.
  void swiglu_oai(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override;
  void geglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) override;
  void scale(DevicePtr x, float s, int64_t n) override;
  void softcap(DevicePtr x, float cap, int64_t n) override;
  void add(DevicePtr y, DevicePtr x, int64_t n) override;
  void add_bias(DevicePtr y, const Matrix& bias, int n_tokens, int n) override;
  void get_rows(const Matrix& w, const int32_t* ids, int n, DevicePtr out) override;
  bool routes_experts() const override { return true; }
  void route_experts(DevicePtr logits, int n_tokens, int n_expert, int k, float scale, DevicePtr experts,
                     DevicePtr weights) override;
  void matmul_routed(const Matrix& stacked, int64_t expert_rows, DevicePtr x, int x_share, DevicePtr experts,
                     DevicePtr y, int n_slots) override;
  void weighted_sum(DevicePtr rows, DevicePtr weights, int n_tokens, int k, int width, DevicePtr out) override;

 private:
  // A weight matrix in device memory, found by the host address it came from.
  struct DeviceWeight {
    const uint8_t* host = nullptr;
    size_t host_bytes = 0;
    size_t host_row_stride = 0;
    DType type = DType::F32;  // on the device (F32 when the host type has no shader)
    size_t row_stride = 0;    // on the device
    int64_t part_rows = 0;    // rows per buffer (all of them unless the matrix is larger than one may bind)
    std::vector<std::unique_ptr<VulkanBuffer>> parts;
  };
  // Rows [first_row, first_row + rows) of an op's matrix, in one buffer.
  struct WeightPart {
    VkBuffer buffer;
    size_t offset;      // bytes into the buffer
    int64_t first_row;  // of the op's matrix
    int64_t rows;
    DType type;
    size_t row_stride;
  };
  struct PendingDownload {
    void* dst;
    size_t staging_offset;
    size_t bytes;
  };

  std::string name_;
  int index_ = 0;
  int max_tokens_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_{};
  uint64_t heap_bytes_ = 0;
  uint64_t max_buffer_range_ = 0;
  uint32_t max_groups_[3] = {65535, 65535, 65535};
  std::atomic<uint64_t> held_bytes_{0};  // read by devices() on other threads
  bool warned_widened_ = false;
  DriverAllocator driver_allocator_;
  DeviceCounters counters_;
  // Indexed as the shader table; compiled at load (prepare_weights).
  std::vector<VulkanPipeline> pipelines_;
  std::unique_ptr<VulkanRecorder> recorder_;
  // Shader table indices, found once: the fixed ops' (in kRmsnorm... order)
  // and each weight type's matmul, one-token matmul, routed (experts)
  // matmul and embedding lookup (-1: none).
  enum FixedShader { kRmsnorm, kRope, kElementwise, kAttention, kKvStore, kRoute, kWeightedSum, kDeltaConv, kDeltaNorm,
                     kDeltaRule, kCopyRows, kAttentionCombine };
  std::vector<int> fixed_shaders_;
  static constexpr int kTypeSlots = 40;  // DType values
  std::array<int16_t, kTypeSlots> matmul_shader_ = filled(-1);
  std::array<int16_t, kTypeSlots> matvec_shader_ = filled(-1);
  std::array<int16_t, kTypeSlots> tiled_shader_ = filled(-1);
  // Prompts through matmul.comp's TILED build (shared memory, 32 tokens a
  // workgroup: a GPU), or its register build (8 tokens: a CPU device such
  // as lavapipe, where a barrier costs more than a re-read). The device's
  // type decides; SHOAL_VULKAN_TILED=1 or 0 says so instead (tests, device-check).
  bool tiled_matmul_ = false;
  std::array<int16_t, kTypeSlots> routed_shader_ = filled(-1);
  std::array<int16_t, kTypeSlots> get_rows_shader_ = filled(-1);
  static constexpr std::array<int16_t, kTypeSlots> filled(int16_t v) {
    std::array<int16_t, kTypeSlots> a{};
    a.fill(v);
    return a;
  }
  std::map<const uint8_t*, DeviceWeight> weights_;
  std::unique_ptr<VulkanBuffer> staging_;  // host-visible: uploads and downloads pass through it
  size_t staging_used_ = 0;
  std::vector<PendingDownload> downloads_;
  std::unique_ptr<VulkanBuffer> rows_;  // the step's seq ids, then its positions: [2][max_tokens] int32
  // RoPE's cos and sin per (token, pair), computed on the host in double as
  // the CPU does, once per step for each distinct set of rope parameters.
  struct RopeTable {
    float freq_base, freq_scale;
    int rope_dim;
    const Matrix* factors;
    RopeYarn yarn;
    size_t offset;  // bytes into rope_tables_
  };
  std::unique_ptr<VulkanBuffer> rope_tables_;
  std::vector<RopeTable> step_rope_tables_;
  std::vector<int32_t> step_positions_;
  std::array<size_t, 2> step_seqs_{};  // the step's sequence ids: [first, last + 1)
  std::vector<float> rope_scratch_;
  std::unique_ptr<VulkanBuffer> dummy_;  // bound where a shader's optional input is absent
  // A long context's decode step: its attention's split partials
  // (attention.comp, p.split), 32 MiB made at the first such step (released
  // before the device); a step they do not fit walks the splits in one
  // workgroup (the same bits).
  std::unique_ptr<VulkanBuffer> attention_parts_;
  std::unique_ptr<VulkanBuffer> lookup_ids_;  // get_rows' token ids: [max_tokens] int32
  int step_tokens_ = 0;
  bool in_step_ = false;  // between begin_step and finish_step

  friend class VulkanBuffer;
  std::unique_ptr<VulkanBuffer> make_buffer(size_t bytes, bool host_visible);
  uint16_t pipeline(int shader);  // compiles it on first use; returns its index
  void init(uint32_t queue_family);  // the constructor's part after the device exists
  void release();  // every Vulkan object this backend made (constructor failures, destructor)
  void forget_recorded();  // the commands, staging and pending downloads of a submission done or dropped
  void forget_buffer(VkBuffer b);  // a buffer is being freed
  void flush();   // submits what is recorded, waits, completes downloads
  size_t stage_bytes(size_t bytes);  // room in the staging buffer; flushes when full
  void copy_command(VkBuffer src, size_t src_offset, VkBuffer dst, size_t dst_offset, size_t bytes);
  // One dispatch and the bytes it reads and writes (its barrier follows from them).
  // What a dispatch moves and computes, for DeviceCounters::kernels.
  struct Traffic {
    KernelClass kind;
    double read = 0, written = 0, flops = 0;
  };
  void dispatch(int shader, std::initializer_list<VkBuffer> buffers, const void* push, size_t push_bytes, uint32_t gx,
                uint32_t gy, uint32_t gz, std::initializer_list<BufferRange> reads,
                std::initializer_list<BufferRange> writes, const Traffic& traffic);
  BufferRange step_rows() const;  // the step's seq ids and positions
  // A layer's K or V rows of the step's sequences.
  BufferRange step_cache(DevicePtr base, size_t seq_stride) const;
  // The device copy a prepared matrix is in (and the matrix's first row in it).
  const DeviceWeight& held_weight(const Matrix& w, int64_t* first_row = nullptr) const;
  // f(WeightPart) for each buffer holding some of w's rows, in row order.
  template <class F>
  void for_each_part(const Matrix& w, F&& f) const;
  WeightPart weight_whole(const Matrix& w) const;
  // Workgroups for `rows` in groups of group_rows: x up to the device's
  // limit, the rest continued in z (a vocabulary head).
  struct RowGrid {
    uint32_t x, z;
  };
  RowGrid row_grid(int64_t rows, int64_t group_rows) const;  // a vector (a norm, a bias): one part
  // elementwise.comp's op over n values; b (optional) is a buffer and byte offset.
  void elementwise(uint32_t op, DevicePtr a, VkBuffer b, size_t b_offset, DevicePtr out, int64_t n, float param,
                   uint32_t period);
  void check_step(int n_tokens) const;
};

}  // namespace shoal
