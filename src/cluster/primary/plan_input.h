#pragma once
// The model side of a PlanInput, measured from the GGUF itself: what each
// layer weighs, what its KV cache will take, and what stays on the primary.
#include "cluster/device_info.h"
#include "cluster/primary/planner.h"
#include "model/kv_cache.h"

namespace shoal {
namespace gguf { class File; }
struct ModelConfig;

// Fills layer_bytes (every tensor named blk.N.*, summed per layer),
// layer_kv_bytes (f32 K and V for n_ctx x n_seq as KvCache allocates: a
// windowed layer holds only its window and one batch),
// primary_bytes (token_embd + output_norm + output — the embedding once when
// the output is tied — + rope_freqs + an estimate of the scratch buffers),
// head_bytes and activation_bytes. Devices, reserve and tensor_split are
// left for the caller. n_ctx <= 0 means the engine's default. rewind_rows:
// Engine::rewind_rows (a hybrid model's state keeps a step to take back).
// mtp_draft: the primary also holds the MTP draft (mtp_draft_cost's held_bytes).
PlanInput plan_input_for_model(const gguf::File& file, const ModelConfig& config, int n_ctx, int n_seq, int n_batch,
                               KvTypes kv_types, int rewind_rows = 0, bool mtp_draft = false);

// The model's own MTP block as the draft (--spec-type mtp), on the primary:
// what one guess reads (the block, a mixture's routed share of its experts,
// and the one output head it uses) and what the primary holds for it (the
// block's weights, a KV cache like the last attention layer's, its buffers
// and a row of logits a sequence). Zero for a file without the block.
struct MtpDraftCost {
  double read_bytes = 0;
  uint64_t held_bytes = 0;
};
MtpDraftCost mtp_draft_cost(const gguf::File& file, const ModelConfig& config, int n_ctx, int n_seq, int n_batch,
                            KvTypes kv_types);

// What the device probes time for this model: the type most of the
// layers' weight bytes are in and the row length most of those bytes have
// (the batched rate), and the matrices of its first layers, in file order,
// until they outgrow the caches (the decode rate; of an expert tensor, the
// rows a token is routed to).
ProbeShape probe_shape_for(const gguf::File& file, const ModelConfig& config);

// The scratch the primary allocates at load for these sizes (pipeline
// buffers, logits, backend activation scratch, one stage's layer scratch):
// an estimate that follows Engine, Pipeline, CpuBackend and LayerScratch.
uint64_t primary_scratch_bytes(const ModelConfig& config, int n_seq, int n_batch);

}  // namespace shoal
