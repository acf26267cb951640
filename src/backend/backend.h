#pragma once
// The boundary between the model and the hardware. A backend owns its
// memory (buffers, the prepared weights, the KV cache) and runs a handful of
// ops on activations that live there: host memory for the CPU backend,
// device memory for the Vulkan backend (and, later, CUDA).
//
// A stage step is begin_step (the batch's sequence ids and positions),
// upload of the residual stream, the layers' ops, download, finish_step: a
// GPU backend records the ops into one submission and synchronises once.
//
// Every op computes each output row from its own input row (or, for
// attention, from its own query and the cache), in a fixed order, so a
// backend's results never depend on how many tokens are in a batch or how
// its work is spread (docs/design.md).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/buffer.h"
#include "tensor/matrix.h"

namespace shoal {

// A weight matrix the ops of a stage will read, handed to prepare_weights.
// slice_rows: rows per separately addressed slice (one expert's rows in a
// stacked expert tensor), 0 when the matrix is read whole. rows_only: never
// a matmul's weight, read row by row as stored (an embedding not shared
// with the output, by get_rows; norms, biases, a convolution's taps), which
// the CPU reads where it lies and a GPU holds beside the rest.
// Attention's heads, for a tensor group that divides them
// (backend/tensor_split_backend.h): n_head query heads of head_dim values
// (q_head_rows rows of the Q projection each: 2 head_dim with an output
// gate beside each query), n_head_kv key and value heads.
struct AttentionHeads {
  int n_head = 0, n_head_kv = 0, head_dim = 0, q_head_rows = 0;
  bool any() const { return n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0; }
  bool operator==(const AttentionHeads&) const = default;
};
// Which of attention's projections a weight is: its rows are heads.
enum class HeadRows : uint8_t { None, Query, KeyValue };

struct WeightToPrepare {
  Matrix* matrix = nullptr;
  int64_t slice_rows = 0;
  bool rows_only = false;
  bool experts = false;  // the slices are a mixture's experts (slice e: expert e)
  HeadRows head_rows = HeadRows::None;
  AttentionHeads heads{};  // with head_rows: the layer's heads
};
// Host memory a backend made while preparing weights; whoever holds the
// weights keeps it as long as they are used.
using PreparedMemory = std::vector<std::unique_ptr<uint8_t[]>>;

// YaRN (and a plain magnitude scale), as llama.cpp applies them: between
// the correction dims (from beta_fast, beta_slow and the original context)
// each pair's angle ramps from the scaled to the unscaled one by
// ext_factor, and cos and sin are multiplied by attn_factor, times
// 1 + 0.1 ln(1 / freq_scale) when ext_factor is not 0 (backend/rope_angles.h).
struct RopeYarn {
  float ext_factor = 0.0f;   // 0: no YaRN
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int orig_ctx = 0;          // the context the model was trained at before scaling
  bool operator==(const RopeYarn&) const = default;
};

struct RopeParams {
  int head_dim = 0;
  int rope_dim = 0;          // leading dims that rotate
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // positions are multiplied by this
  bool neox = false;         // rotate halves instead of adjacent pairs
  const Matrix* freq_factors = nullptr;  // [rope_dim/2] f32 divisors, or null
  RopeYarn yarn;
  int rope_offset = 0;       // the rotating dims start here in each head (latent attention's trail its nope part)
};

// One layer's KV cache. Entry (seq, pos) of K is one row of `width` values
// in k_type (F32, F16 or Q8_0) at k + seq * k_seq_stride + slot(pos) *
// k_row_bytes; V likewise. P is a host pointer (the CPU kernels' view) or a
// DevicePtr (the backend boundary's).
template <class P>
struct KvView {
  P k{};
  P v{};
  DType k_type = DType::F32;
  DType v_type = DType::F32;
  size_t k_row_bytes = 0;
  size_t v_row_bytes = 0;
  size_t k_seq_stride = 0;  // bytes between sequences
  size_t v_seq_stride = 0;
  int width = 0;            // n_head_kv * head_dim (a tensor group member's: its KV heads')
  int ring = 0;             // > 0: a sliding-window layer keeps its positions in a ring of this many
  // Latent attention: V is each K row's leading values and has no storage
  // of its own (v, v_type, strides repeat K's); kv_store writes K only.
  bool v_in_k = false;
  size_t slot(int pos) const { return static_cast<size_t>(ring > 0 ? pos % ring : pos); }
  size_t k_offset(int seq, int pos) const { return seq * k_seq_stride + slot(pos) * k_row_bytes; }
  size_t v_offset(int seq, int pos) const { return seq * v_seq_stride + slot(pos) * v_row_bytes; }
  P k_row(int seq, int pos) const requires std::is_pointer_v<P> { return k + k_offset(seq, pos); }
  P v_row(int seq, int pos) const requires std::is_pointer_v<P> { return v + v_offset(seq, pos); }
  template <class Q>
  KvView<Q> with(Q k_base, Q v_base) const {
    KvView<Q> o{k_base, v_base, k_type, v_type, k_row_bytes, v_row_bytes, k_seq_stride, v_seq_stride, width, ring, v_in_k};
    return o;
  }
};
using KvLayer = KvView<DevicePtr>;

// A Gated DeltaNet layer's recurrent memory (model/recurrent_state.h), per
// sequence: the convolution's last conv_kernel - 1 inputs, oldest first
// ([conv_kernel - 1][conv_width] floats at conv + seq * conv_seq_stride
// bytes), and each value head's state ([n_v_heads][head_dim][head_dim]
// floats at ssm + seq * ssm_seq_stride; for head h, element [j][i] is
// row i, column j of the state S that maps keys to values).
struct RecurrentLayer {
  DevicePtr conv{};
  DevicePtr ssm{};
  size_t conv_seq_stride = 0;
  size_t ssm_seq_stride = 0;
};

// A Gated DeltaNet's sizes and per-layer constants.
struct DeltaNetParams {
  const Matrix* conv = nullptr;     // [conv_width][conv_kernel] f32: each channel's taps, oldest input first
  const Matrix* dt_bias = nullptr;  // [n_v_heads] f32
  const Matrix* a = nullptr;        // [n_v_heads] f32, negative: the decay's rate
  int conv_kernel = 0;
  int head_dim = 0;
  int n_k_heads = 0;
  int n_v_heads = 0;
  float eps = 1e-6f;  // in the L2 norm of q and k
  // Value head h reads key head h / (n_v_heads / n_k_heads) (qwen3next),
  // not h % n_k_heads (qwen35).
  bool keys_interleaved = false;
  int key_head_of(int h) const { return keys_interleaved ? h / (n_v_heads / n_k_heads) : h % n_k_heads; }
  int key_width() const { return head_dim * n_k_heads; }
  int value_width() const { return head_dim * n_v_heads; }
  int conv_width() const { return 2 * key_width() + value_width(); }
};

// Ops only some architectures need. Some have a default in Backend made
// of the required ops or through the host (Backend::has_default), which a
// device overrides to go faster; a backend may lack the others, and a
// stage whose layers need one it lacks is refused at load, naming the op.
// LatentAttention: attention whose V is a prefix of its K rows, with a
// value head size of its own (AttentionShape::v_head_dim), and rope at an
// offset into the head. PlainNorm: rmsnorm with an empty weight (each
// value times 1, gemma4's V).
enum class OptionalOp { DeltaNet, SigmoidMul, SplitHalves, AttentionSinks, SwigluOai, LatentAttention, PlainNorm };
const char* optional_op_name(OptionalOp op);

struct AttentionShape {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 1.0f;  // applied to q·k
  int window = 0;      // attend to the last `window` positions only; 0: all
  // gpt-oss: a learned logit per query head that joins each softmax's
  // denominator (attention that may go nowhere); [n_head] f32, or null.
  const Matrix* sinks = nullptr;
  // Values per head of V and of the output, when not head_dim (latent
  // attention: the latent, a prefix of the K row); 0: head_dim.
  int v_head_dim = 0;
  int v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
};

// A GPU backend's kernels by what they do, and what each class moved and
// computed: the bytes its dispatches read from and wrote to device memory
// (weights and the KV cache once per workgroup that streams them, as the
// shaders do; activations, which caches hold, once per dispatch) and its
// floating-point operations. `shoal bench -v` prints
// them per token and per prompt batch, and what they allow on a GPU's
// roof (docs/architecture.md, "What a GPU allows").
enum class KernelClass : uint8_t {
  Matmul, Matvec, Attention, Recurrence, Norm, Rope, KvStore, Elementwise, Routing, Embedding, Copy, Count
};
constexpr const char* kKernelClassNames[] = {"matmul",  "matvec",   "attention",   "recurrence",
                                             "norm",    "rope",     "kv store",    "element-wise",
                                             "routing", "embedding", "copy"};
struct KernelTraffic {
  uint64_t dispatches = 0;
  double bytes_read = 0, bytes_written = 0, flops = 0;
};

// What a GPU backend did on its device, counted since it was made (shoal
// bench -v prints them per step); the CPU backend has none.
struct DeviceCounters {
  uint64_t steps = 0;
  uint64_t dispatches = 0;
  uint64_t copies = 0;
  uint64_t barriers = 0;
  uint64_t submissions = 0;
  uint64_t host_waits = 0;
  uint64_t plans_recorded = 0;      // command buffers recorded
  uint64_t plans_replayed = 0;      // submissions that reused one
  uint64_t descriptor_sets = 0;     // allocated and written
  uint64_t pipelines_compiled = 0;
  uint64_t driver_allocations = 0;  // host memory the driver asked for
  KernelTraffic kernels[static_cast<size_t>(KernelClass::Count)]{};
};

// The kinds of device a backend drives; kind_name() is what HELLO and
// /v1/cluster report ("cpu", "vulkan").
enum class BackendKind { Cpu, Vulkan };
inline const char* kind_name(BackendKind kind) { return kind == BackendKind::Cpu ? "cpu" : "vulkan"; }

// What a device implements: the pure virtuals below (identity, memory,
// weights, the step, and twelve ops), each checked by the conformance suite
// (tests/unit/backend_conformance_test.cpp). The rest have defaults: faster
// forms of required work (matmuls, copy_rows), the mixture's routing on
// the device (else the host routes), and the optional ops.
// docs/architecture.md, "Adding a device", lists them.
class Backend {
 public:
  virtual ~Backend() = default;
  // "CPU", or the device's name for a GPU.
  virtual std::string name() const = 0;
  // What kind of device: bits match only within one kind.
  virtual BackendKind kind() const = 0;
  // Bytes of memory free on the device now (host memory for the CPU).
  virtual uint64_t free_memory() const = 0;
  virtual std::optional<DeviceCounters> device_counters() const { return std::nullopt; }

  // Memory. upload copies from host memory before it returns and takes
  // effect in op order; download returns with the data (a GPU backend
  // waits for the ops recorded so far); copy's regions must not overlap.
  virtual std::unique_ptr<Buffer> allocate(size_t bytes) = 0;
  virtual void upload(DevicePtr dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, DevicePtr src, size_t bytes) = 0;
  virtual void copy(DevicePtr dst, DevicePtr src, size_t bytes) = 0;
  // Where the backend's buffers are host memory (the CPU's): the floats at
  // p, which its user may write between ops instead of uploading (one copy
  // less); null where they are not.
  virtual float* host_floats(DevicePtr) { return nullptr; }
  // n_rows rows of `width` floats from src to dst, rows `src_stride` and
  // `dst_stride` floats apart (a head's slice of every token, and back).
  virtual void copy_rows(DevicePtr dst, int64_t dst_stride, DevicePtr src, int64_t src_stride, int64_t width,
                         int64_t n_rows) {
    for (int64_t r = 0; r < n_rows; ++r)
      copy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(width) * sizeof(float));
  }

  // The bytes between two KV cache rows of row_bytes each: a backend may pad
  // them (Vulkan's shaders write whole 32-bit words, and a q8_0 row of an
  // odd number of 34-byte blocks ends mid-word).
  virtual size_t kv_row_stride(size_t row_bytes) const { return row_bytes; }

  // Once, after binding: makes these matrices ready for this backend's ops
  // (the CPU may regroup rows into memory it appends to `keep` and point the
  // matrix there; a GPU uploads). Returns the bytes it added.
  virtual uint64_t prepare_weights(std::span<const WeightToPrepare> weights, PreparedMemory& keep) = 0;
  // What prepare_weights would add, for memory planning.
  virtual uint64_t prepared_bytes(std::span<const WeightToPrepare> weights) const = 0;

  // A stage step: the batch's rows, handed over once; the step's closing
  // download and finish_step synchronise (a mixture of experts also reads
  // its router's logits back mid-step).
  virtual void begin_step(const int32_t* seq_ids, const int32_t* positions, int n_tokens) = 0;
  virtual void finish_step() = 0;
  // After an error inside a step: what the step recorded is dropped, so the
  // next step does not run it.
  virtual void abandon_step() {}

  // y[t][r] = W[r] · x[t]; x is [n_tokens][w.cols], y is [n_tokens][w.rows].
  virtual void matmul(const Matrix& w, DevicePtr x, DevicePtr y, int n_tokens) = 0;
  // Several matrices on one input (Q, K and V; gate and up), each y as
  // matmul's. A backend may convert x once and pass all rows in one go (the
  // CPU: one wait for its threads instead of one per matrix).
  struct MatmulOutput {
    const Matrix* w;
    DevicePtr y;
  };
  virtual void matmuls(std::span<const MatmulOutput> outputs, DevicePtr x, int n_tokens) {
    for (const MatmulOutput& o : outputs) matmul(*o.w, x, o.y, n_tokens);
  }
  // y[t] = x[t] / rms(x[t]) * weight, over rows of n values (y may be x);
  // an empty weight multiplies by 1 where the backend runs OptionalOp::PlainNorm.
  virtual void rmsnorm(DevicePtr x, const Matrix& weight, DevicePtr y, int n_tokens, int n, float eps) = 0;
  // Rotates each of n_heads heads of x[t] by the step's positions[t]; x is [n_tokens][n_heads * head_dim].
  virtual void rope(DevicePtr x, int n_tokens, int n_heads, const RopeParams& p) = 0;
  // Writes rows k[t], v[t] ([n_tokens][width]) at the step's (seq_ids[t], positions[t]).
  virtual void kv_store(const KvLayer& kv, DevicePtr k, DevicePtr v, int n_tokens) = 0;
  // Causal attention: query t of the step attends over cache entries
  // 0..positions[t] of its sequence. q, out: [n_tokens][n_head * head_dim].
  virtual void attention(DevicePtr q, const KvLayer& kv, int n_tokens, const AttentionShape& shape, DevicePtr out) = 0;
  // out[i] = silu(gate[i]) * up[i]
  virtual void swiglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) = 0;
  // out[i] = gelu(gate[i]) * up[i], gelu in its tanh form
  virtual void geglu(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n) = 0;
  // x[i] *= s
  virtual void scale(DevicePtr x, float s, int64_t n) = 0;
  // x[i] = cap * tanh(x[i] / cap)
  virtual void softcap(DevicePtr x, float cap, int64_t n) = 0;
  // y[i] += x[i]
  virtual void add(DevicePtr y, DevicePtr x, int64_t n) = 0;
  // y[t][i] += bias[i] over rows of n values.
  virtual void add_bias(DevicePtr y, const Matrix& bias, int n_tokens, int n) = 0;
  // out[t] = dequantized row ids[t] of w (host ids, checked against w.rows).
  virtual void get_rows(const Matrix& w, const int32_t* ids, int n, DevicePtr out) = 0;

  // --- Optional: each has a default made of the ops above (or the host). ---

  // A mixture routed on the host (where routes_experts() is false):
  // run(e) computes the slots routed to expert e into `out` with the ops
  // above, for each expert in order; then out's [n_slots][width] floats
  // come to `host`. A wrapper may run some experts itself and fetch the
  // rest (a tensor group divides them).
  struct HostRoutes {
    const int* slot_expert = nullptr;  // slot i's expert
    size_t n_slots = 0;
    int n_expert = 0;
    int width = 0;  // floats a slot
  };
  virtual void run_routed_experts(const HostRoutes& routes, const std::function<void(int)>& run, DevicePtr out,
                                  float* host) {
    for (int e = 0; e < routes.n_expert; ++e) run(e);
    download(host, out, routes.n_slots * static_cast<size_t>(routes.width) * sizeof(float));
  }

  // A mixture of experts without leaving the device (a GPU: no read-back
  // mid-step). Where routes_experts() is false the layer routes on the host.
  // The plain router: per token, the k experts with the highest logits
  // (ties to the lower id) into experts [n_tokens][k] (int32), and a
  // softmax over their logits times `scale` into weights [n_tokens][k]
  // (k <= 64).
  virtual bool routes_experts() const { return false; }
  virtual void route_experts(DevicePtr logits, int n_tokens, int n_expert, int k, float scale, DevicePtr experts,
                             DevicePtr weights);
  // y[s] = expert experts[s] of `stacked` (slices of expert_rows rows) times
  // x[s / x_share], for n_slots slots; y rows are expert_rows apart.
  virtual void matmul_routed(const Matrix& stacked, int64_t expert_rows, DevicePtr x, int x_share, DevicePtr experts,
                             DevicePtr y, int n_slots);
  // out[t] = sum over j < k of weights[t][j] * rows[t k + j], j in order.
  virtual void weighted_sum(DevicePtr rows, DevicePtr weights, int n_tokens, int k, int width, DevicePtr out);

  // Whether this backend runs an optional op (below): those with a default
  // here always; those it lacks throw (LocalStage refuses such a stage).
  virtual bool runs(OptionalOp op) const { return has_default(op); }
  static bool has_default(OptionalOp op) {
    return op == OptionalOp::SigmoidMul || op == OptionalOp::SplitHalves || op == OptionalOp::SwigluOai;
  }
  // A Gated DeltaNet over the step's rows (qwen35). qkv: [n_tokens][conv_width],
  // the joint projection, overwritten; alpha, beta: [n_tokens][n_v_heads];
  // out: [n_tokens][value_width]. Row by row in step order, each on its
  // sequence's state: the causal convolution over the last conv_kernel
  // inputs, then silu; q and k divided by their L2 norm per head; decay
  // g = exp(softplus(alpha + dt_bias) * a) and strength b = sigmoid(beta)
  // per value head; S = g S + b (v - g S k) k^T; out = S q / sqrt(head_dim).
  // A row at position 0 starts its sequence from zero state.
  virtual void delta_net(DevicePtr qkv, DevicePtr alpha, DevicePtr beta, const RecurrentLayer& state,
                         const DeltaNetParams& p, int n_tokens, DevicePtr out);
  // x[i] *= sigmoid(gate[i]). Default: through the host.
  virtual void sigmoid_mul(DevicePtr x, DevicePtr gate, int64_t n);
  // Rows of 2 * half values: each row's first half to a, second to b
  // ([n_rows][half] each). Default: two copy_rows.
  virtual void split_halves(DevicePtr src, int64_t n_rows, int half, DevicePtr a, DevicePtr b);
  // gpt-oss's clamped SwiGLU: x = min(gate, 7), y = clamp(up, -7, 7),
  // out = x * sigmoid(1.702 x) * (y + 1). out may be gate. Default: through the host.
  virtual void swiglu_oai(DevicePtr gate, DevicePtr up, DevicePtr out, int64_t n);
};

}  // namespace shoal
