#pragma once
// What a split costs: one model of time for `shoal plan`, the live planner
// and the published-measurement test. Per stage, a decode step reads the
// stage's weights once (bytes ÷ effective bandwidth) plus the device's
// fixed cost of a step; a prompt of n tokens costs its multiply-adds ÷ the
// device's batched rate. Per hop to a worker, a round trip and the
// activations over the link. How many hops and what else crosses the link
// depends on the relay:
//
//   shoal star   primary -> worker -> primary for each remote stage: one
//                round trip and the hidden state there and back
//   shoal chain  primary -> w1 -> w2 -> ... -> primary: one one-way hop per
//                boundary (half a round trip each)
//   llama.cpp    llama.cpp's RPC backend (rpc-server): per remote stage and
//                step, two round trips (inputs set, result read back after
//                the compute command) and the serialised graph of the
//                stage's layers besides the activations
//
// Devices that did not report a speed get ordinary desktop values, so a
// plan always has a prediction. A prompt's attention over the positions
// each row sees is counted; the cache a decode step reads only in a
// request's prediction (predict_request), which knows the context.
#include <cstdint>
#include <string>
#include <vector>

#include "cluster/primary/planner.h"

namespace shoal {

const char* relay_name(Relay relay);

struct Prediction {
  std::vector<double> stage_ms;  // decode step share of each stage (plan order), hops included
  double head_ms = 0.0;          // the output head on the primary
  double token_ms = 0.0;         // one decode step
  double tok_s = 0.0;            // decode tokens/s
  double prefill_ms = 0.0;       // a prompt of prefill_tokens in one batch, stages one after another
  double prefill_tok_s = 0.0;
  int prefill_tokens = 0;
  // The same prompt as a wavefront of micro-batches (Pipeline, -ub): every
  // stage busy at once; the slowest stage sets the pace. 0: not pipelined
  // (no worker, a chain or llama.cpp's relay, no micro-batch size, or
  // batches shorter than two micro-batches, as Pipeline decides).
  double pipelined_prefill_ms = 0.0;
  double pipelined_prefill_tok_s = 0.0;
};

// A prompt of prefill_tokens (llama-bench's pp512 by default) in batches
// of n_batch (0: one batch) and a decode step of the plan, as `relay` would
// run it; with micro_batch > 0 also the prompt pipelined in micro-batches of
// that size (Shoal's star only).
Prediction predict(const Plan& plan, const PlanInput& input, Relay relay, int prefill_tokens = 512,
                   int micro_batch = 0, int n_batch = 0);

// A request as a user sends one: a prompt, then tokens one at a time.
struct RequestShape {
  int prompt_tokens = 4096;
  int generated = 128;
};
// One request with its prompt on one plan and its tokens on another (the
// same plan for both: a joint placement). The prompt runs as predict()
// runs it (its attention over the positions each row sees included); its
// last row gives the first token. Where the plans differ, each layer's
// cache entries of the prompt (a window's worth for a windowed layer) and
// its recurrent state move, as the layer finishes, from the device that
// computed them to the one that decodes with them, over the slower of the
// two devices' links; the move overlaps the prompt, and what the prompt's
// time does not hide (at least the last layer's part) delays the second
// token. A machine that holds a layer in both keeps its cache in place.
// A decode step reads its weights and the cache of the context it attends
// to: the prompt and half the generated tokens, on average.
struct RequestPrediction {
  double prefill_ms = 0;   // to the first token
  double cache_bytes = 0;  // moved between the plans (0: joint)
  double cache_ms = 0;     // the move at the links' speed
  double exposed_ms = 0;   // of that, after the prompt's end
  double token_ms = 0;     // a decode step, cache reads included
  double total_ms = 0;     // prefill + exposed + (generated - 1) steps
};
RequestPrediction predict_request(const Plan& prompt_plan, const Plan& decode_plan, const PlanInput& input,
                                  Relay relay, const RequestShape& request, int n_batch = 0, int micro_batch = 0);

// Speculative decoding (engine/drafter.h): a step that checks a guess of k
// tokens carries k + 1 rows. Each stage reads its weights once, or computes
// k + 1 rows where that takes longer (its batched rate), and every hop
// carries k + 1 hidden states; so does the head. With each guessed token
// right with probability `acceptance` (independently), a step yields
// (1 - a^(k+1)) / (1 - a) tokens on average; guessing costs draft_token_ms
// a token on the primary (a draft model; 0 for n-gram lookup).
struct Speculation {
  int draft_max = 16;
  double acceptance = 0.7;
  double draft_token_ms = 0.0;
};
struct SpeculativePrediction {
  int draft = 0;                 // the guess length that predicts best (0: none pays)
  double tokens_per_step = 1.0;  // at that length
  double step_ms = 0.0;          // a step checking it, guessing included
  double token_ms = 0.0;         // per token
  double tok_s = 0.0;
  double plain_token_ms = 0.0;   // without speculation, on the same roofline
};
SpeculativePrediction predict_speculative(const Plan& plan, const PlanInput& input, Relay relay,
                                          const Speculation& speculation);

// Tensor groups (-sm tensor): the workers in groups (device indices), the
// layers split evenly among the groups in order (a pipeline of groups),
// the primary keeping the head. A group's members each read their share of
// the divided matrices (tensor_group_weights) and all of the rest
// (experts, norms), the slowest setting the pace; per layer kTensorExchangesPerLayer all-gathers, each
// half a round trip between members (their links to the primary stand in
// for the links between them: the slowest one's round trip) plus what the
// member takes in of the layer's exchange values over its link; a prompt's
// all-gathers carry every token's. A group of one is a worker's own stage.
// One FORWARD there and back from the primary per group, and the head: on
// the last group when it has two members or more (each its share of the
// vocabulary's rows, one more all-gather of the logits, the logits back to
// the primary instead of a row), else on the primary.
// (exchanges_per_layer: another tool's scheme, for the published rows.)
inline constexpr int kTensorExchangesPerLayer = 4;
struct TensorGroupPrediction {
  double compute_ms = 0.0;   // the groups' slowest members' shares of a decode step, added up
  double exchange_ms = 0.0;  // their all-gathers
  double hop_ms = 0.0;       // primary to each group and back
  double head_ms = 0.0;      // the head, where it runs (and, on a group, its logits' trip)
  bool head_on_group = false;
  double token_ms = 0.0;     // 0: nothing predicted (no groups, or an input without divided bytes)
  double tok_s = 0.0;
  double prefill_ms = 0.0;   // a prompt of prefill_tokens in batches of n_batch, group after group
  double prefill_tok_s = 0.0;
};
TensorGroupPrediction predict_tensor_groups(const PlanInput& input, const std::vector<std::vector<int>>& groups,
                                            int prefill_tokens = 512, int n_batch = 0,
                                            int exchanges_per_layer = kTensorExchangesPerLayer);
// Each group's members' share weights (tensor_split_backend.h's ShareWeights),
// by rank: --tensor-split's entries for them when it is given, in
// thousandths of the largest (a 0 is weight 1: the one unit every member
// takes and a thousandth of the rest), else their measured decode speeds
// (matvec GB/s; a GPU's is not measured and counts as the default) in
// twentieths of the fastest, so that a fast and a slow member finish their
// shares together. Members within 1.5x of each other share evenly: a probe
// on a busy machine varies by a third between runs, and identical machines
// should not get uneven shares from noise.
std::vector<std::vector<int>> tensor_group_weights(const PlanInput& input,
                                                   const std::vector<std::vector<int>>& groups);
// Why the groups cannot hold their layers (a member whose share of the
// weights, the undivided rest and its KV heads' part of the cache exceed what it lends),
// or "" when every member fits.
std::string tensor_group_misfit(const PlanInput& input, const std::vector<std::vector<int>>& groups);
// Group `group` of n_groups holds layers [begin, end) of n_layer.
struct LayerRange {
  int begin = 0, end = 0;
};
LayerRange tensor_group_layers(int n_layer, int n_groups, int group);

// Decode time of one stage on `device` holding n_layers layers that read
// read_bytes a step, n_recurrent of them Gated DeltaNets: what the
// speed-aware split minimises (hops included, head excluded). 0 for a
// stage without layers.
double stage_decode_ms(const PlanInput& input, int device, uint64_t read_bytes, int n_layers, int n_recurrent,
                       Relay relay);
// How many of layers [begin, end) are recurrent.
int recurrent_layers(const PlanInput& input, int begin, int end);
// Bytes a decode step reads from layers [begin, end): the routed experts
// only, where the input says so.
uint64_t decode_read_bytes(const PlanInput& input, int begin, int end);

// What llama.cpp's RPC graph sends per layer and step: about 40 tensors
// (weights, intermediates, views) of 296 bytes each (ggml-rpc's packed
// rpc_tensor: id, type, buffer, ne, nb, op, 64 bytes of op_params, flags,
// 10 sources, view, data, a 64-byte name, padding).
inline constexpr double kLlamaRpcGraphBytesPerLayer = 40 * 296;

}  // namespace shoal
