#pragma once
// The feed-forward block of a layer: a gated FFN (SwiGLU or GeGLU), or a
// mixture of experts of such FFNs behind a softmax router.
#include "backend/backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace shoal {

struct LayerScratch;

// out[t] = down(act(gate · in[t]) * (up · in[t])); in, out: [n][n_embd].
void dense_ffn(Backend& be, const ModelConfig& c, const LayerWeights& w, DevicePtr in, DevicePtr out, int n,
               LayerScratch& s);

// Each token goes through the n_expert_used experts with the highest router
// probabilities (softmax over all experts, ties to the lower id), and its
// output is their sum weighted by those probabilities renormalised to sum 1
// (qwen3moe, mixtral, as llama.cpp). Only the chosen experts' rows are read.
// A token's result depends only on its own row: experts run over the tokens
// routed to them, and each token sums its experts in its own rank order.
// On a backend that routes experts itself (a GPU: Backend::routes_experts)
// the plain router's layers never leave the device; the rest route on the
// host.
// router_in: what the router reads where it does not read `in` (gemma4:
// the layer's input, normalised with ffn_gate_inp.scale).
void expert_ffn(Backend& be, const ModelConfig& c, const LayerWeights& w, DevicePtr in, DevicePtr out, int n,
                LayerScratch& s, DevicePtr router_in = {});

// Gemma 4's FFN: a dense FFN and experts side by side on the layer's input
// x ([n][n_embd], its ffn_norm in s.norm), each through its own norms, the
// two summed into s.proj.
void dense_and_expert_ffn(Backend& be, const ModelConfig& c, const LayerWeights& w, DevicePtr x, int n,
                          LayerScratch& s);

}  // namespace shoal
