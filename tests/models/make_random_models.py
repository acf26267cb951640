#!/usr/bin/env python3
"""Small random-weight GGUFs, one per architecture Shoal runs, for tests.

Usage: tests/models/make_random_models.py [--dir DIR] [--list] [NAME ...]

Each model has a few layers of width 256 (8 experts, top 2, for MoE) and the
512-token SentencePiece vocabulary of tests/data/models/stories260K.gguf. The
weights are uniform random numbers from a fixed seed per tensor, stored F32,
so the references that llama.cpp computes on them (tests/golden/random-*.json,
made by tests/golden/make_reference.py) check the architecture, not
quantization noise. Files are written once into the cache (--dir, else
$SHOAL_MODELS_DIR/random, else ~/.cache/shoal/models/random) and checked
against the sha256 recorded below: a changed file would make the committed
references meaningless, so a mismatch is an error, not a silent rewrite.
Prints each model's path on stdout.
"""
import argparse
import os
import sys
import zlib
from pathlib import Path

import gguf
import numpy as np

from gguf_files import finish, make_pinned

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER_SOURCE = ROOT / "tests" / "data" / "models" / "stories260K.gguf"

QWEN3_TEMPLATE = """{%- for message in messages %}
{%- if message.role == "assistant" and '</think>' in message.content %}
{{- '<|im_start|>assistant\\n' + message.content.split('</think>')[-1].lstrip('\\n') + '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}
{{- '<think>\\n\\n</think>\\n\\n' }}
{%- endif %}
{%- endif %}"""

# Shared by every model: width, vocabulary, depth unless the entry says otherwise.
BASE = dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=3, ctx=4096)

# name -> architecture, hyperparameters, and the tensors of one layer (GGUF
# names without blk.N.). Shapes follow llama.cpp's loaders.
# A multi-token-prediction block's own tensors beside its layer's (llama.cpp's
# nextn names: the projection of [embedding; hidden], the norms of each, and
# the norm before the shared output head).
NEXTN_LAYER = ["nextn.eh_proj", "nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm"]

MODELS = {
    # Qwen3: Q/K RMSNorm per head; head size (96) != n_embd / n_head; a
    # thinking chat template (its structure, written for the tests).
    "random-qwen3": dict(arch="qwen3", head_dim=96, rope_base=1e6, chat_template=QWEN3_TEMPLATE,
                         layer=["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                                "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"],
                         sha256="5bbabd51e022b463611538126fe23fc0e8497e302f10bb1375af12367ae04013"),
    # Gemma 3: six layers so that layer 5 is global and 0-4 slide over an
    # 8-token window with their own rope base; embedding scale, GeGLU,
    # pre- and post-norms; a final logit soft-cap to exercise it.
    "random-gemma3": dict(arch="gemma3", n_layer=6, n_head_kv=1, rope_base=1e6, rope_base_swa=1e4,
                          sliding_window=8, softcap=30.0,
                          layer=["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                                 "attn_output", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up",
                                 "ffn_down", "post_ffw_norm"],
                          sha256="2ffe7ec66eaf43c75b75fbc0f6fbce35664fd31d89524b794dd3d3724a5f51e2"),
    # Qwen3-MoE: router + 8 experts of width 128, top 2, weights renormalised.
    "random-qwen3moe": dict(arch="qwen3moe", rope_base=1e6, n_expert=8, n_expert_used=2, n_ff_exp=128,
                            layer=["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                                   "attn_output", "ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps",
                                   "ffn_down_exps"],
                            sha256="8549e397747be7ab882109a317dea82da1634f9e7ab3915bbe5d23422a821535"),
    # Mixtral: llama with experts (the expert width is feed_forward_length).
    "random-mixtral": dict(arch="llama", n_ff=128, n_expert=8, n_expert_used=2,
                           layer=["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                                  "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"],
                           sha256="3a2531c1b8aaa2263462fee158c4200446f8f9a7ddad3efa7aab581d62ed70e2"),
    # Qwen3.5 (hybrid): Gated DeltaNet layers (0 and 2) and gated full
    # attention (1 and 3: every second layer here, every fourth in the real
    # models); 2 key heads shared by 4 value heads of 32; a causal
    # convolution of 4; multi-section rope over a quarter of each head; the
    # FFN norm is stored as post_attention_norm. And, as the real files and
    # llama.cpp's converter lay it out, one multi-token-prediction block
    # after the four: a full-attention layer with its nextn projection and
    # norms (the draft of --spec-type mtp).
    "random-qwen35": dict(arch="qwen35", n_layer=4, rope_base=1e7, rope_dim=16, rope_sections=[3, 3, 2, 0],
                          full_attention_interval=2, q_gate=True, nextn=1, nextn_layer=NEXTN_LAYER,
                          ssm=dict(conv_kernel=4, state_size=32, group_count=2, time_step_rank=4),
                          layer=["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                                 "attn_output", "post_attention_norm", "ffn_gate", "ffn_up", "ffn_down"],
                          recurrent_layer=["attn_norm", "attn_qkv", "attn_gate", "ssm_conv1d", "ssm_dt", "ssm_a",
                                           "ssm_beta", "ssm_alpha", "ssm_norm", "ssm_out", "post_attention_norm",
                                           "ffn_gate", "ffn_up", "ffn_down"],
                          sha256="675dda1ac113f6da377681620ac6ed93d97c80e45578bf07b6878f500c3b3373"),
    # Qwen3.5-MoE: the same layers with 8 routed experts of width 128 (top 2)
    # and a shared expert of 128 gated by sigmoid(ffn_gate_inp_shexp . x);
    # its MTP block is a full-attention layer of experts.
    "random-qwen35moe": dict(arch="qwen35moe", n_layer=4, rope_base=1e7, rope_dim=16, rope_sections=[3, 3, 2, 0],
                             full_attention_interval=2, q_gate=True, n_expert=8, n_expert_used=2, n_ff_exp=128,
                             nextn=1, nextn_layer=NEXTN_LAYER,
                             n_ff_shexp=128,
                             ssm=dict(conv_kernel=4, state_size=32, group_count=2, time_step_rank=4),
                             layer=["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                                    "attn_output", "post_attention_norm", "ffn_gate_inp", "ffn_gate_exps",
                                    "ffn_up_exps", "ffn_down_exps", "ffn_gate_inp_shexp", "ffn_gate_shexp",
                                    "ffn_up_shexp", "ffn_down_shexp"],
                             recurrent_layer=["attn_norm", "attn_qkv", "attn_gate", "ssm_conv1d", "ssm_dt", "ssm_a",
                                              "ssm_beta", "ssm_alpha", "ssm_norm", "ssm_out", "post_attention_norm",
                                              "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
                                              "ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp",
                                              "ffn_down_shexp"],
                             sha256="64409168cab8e9beacac38063b6df1f0c0347d46a0a6a39484763d0cc29c07f1"),
    # gpt-oss: biased attention with a sink logit per head, a 128-token window
    # on every other layer (the long prompt runs past it), YaRN (factor 32
    # over 4096, as the real files), 8 experts of 128 (top 2) with biases and
    # the clamped SwiGLU; the FFN norm stored as post_attention_norm.
    "random-gpt-oss": dict(arch="gpt-oss", n_layer=4, rope_base=150000.0, sliding_window=128, n_expert=8,
                           n_expert_used=2, n_ff_exp=128, yarn=dict(factor=32.0, original_context_length=4096),
                           layer=["attn_norm", "attn_q", "attn_q.bias", "attn_k", "attn_k.bias", "attn_v",
                                  "attn_v.bias", "attn_output", "attn_output.bias", "attn_sinks",
                                  "post_attention_norm", "ffn_gate_inp", "ffn_gate_inp.bias", "ffn_gate_exps",
                                  "ffn_gate_exps.bias", "ffn_up_exps", "ffn_up_exps.bias", "ffn_down_exps",
                                  "ffn_down_exps.bias"],
                           sha256="777c50b05f0a7489ebbd6123376261cb0de9b10b4e9f4dcef94744bd81010be6"),
    # DeepSeek V3 (deepseek2): multi-head latent attention (query rank 96,
    # latent 128, heads of 64 nope + 32 rope values, values of 64; the cache
    # row is the latent and the rope key, 160 values), YaRN with DeepSeek's
    # multiplier (0.1 x mscale_all_dim 0.707, as DeepSeek-V2's), one leading
    # dense layer, then 8 experts of 128 in 4 groups (the best 2 groups
    # compete), sigmoid gating with a selection bias, weights normalised and
    # scaled by 2.5, and one ungated shared expert; and DeepSeek V3's
    # multi-token-prediction block after the four (a layer of experts).
    "random-deepseek2": dict(arch="deepseek2", n_layer=4, n_head_kv=1, head_dim=160, rope_dim=32, rope_base=1e4,
                             n_expert=8, n_expert_used=2, n_ff_exp=128, n_dense_lead=1, n_shared=1,
                             nextn=1, nextn_layer=NEXTN_LAYER,
                             mla=dict(q_lora_rank=96, kv_lora_rank=128, qk_nope=64, v_head_dim=64),
                             routing=dict(gating=2, norm=True, scale=2.5, groups=4, groups_used=2),
                             yarn=dict(factor=4.0, original_context_length=128, log_multiplier=0.0707),
                             layer=["attn_norm", "attn_q_a", "attn_q_a_norm", "attn_q_b", "attn_kv_a_mqa",
                                    "attn_kv_a_norm", "attn_k_b", "attn_v_b", "attn_output", "ffn_norm",
                                    "ffn_gate_inp", "exp_probs_b.bias", "ffn_gate_exps", "ffn_up_exps",
                                    "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"],
                             lead_layer=["attn_norm", "attn_q_a", "attn_q_a_norm", "attn_q_b", "attn_kv_a_mqa",
                                         "attn_kv_a_norm", "attn_k_b", "attn_v_b", "attn_output", "ffn_norm",
                                         "ffn_gate", "ffn_up", "ffn_down"],
                             sha256="2e71e34082841933c3b8bcb46d57638e3e34eb945e6eaea730414a8a14a88746"),
    # GLM-4.5 (glm4moe): Q/K/V biases and per-head Q/K norms, NeoX rope on
    # half of each head, one leading dense layer, then 8 experts of 128 (top
    # 2) by sigmoid with a selection bias, normalised and scaled by 2.5, and
    # an ungated shared expert; the FFN norm stored as post_attention_norm;
    # and, as the real files carry, one multi-token-prediction block after
    # the model's four (nextn_predict_layers: a plain pass never runs it).
    "random-glm4moe": dict(arch="glm4moe", n_layer=4, rope_dim=32, rope_base=1e6, n_expert=8, n_expert_used=2,
                           n_ff_exp=128, n_dense_lead=1, n_shared=1, nextn=1,
                           routing=dict(gating=2, norm=True, scale=2.5),
                           layer=["attn_norm", "attn_q", "attn_q.bias", "attn_k", "attn_k.bias", "attn_v",
                                  "attn_v.bias", "attn_q_norm", "attn_k_norm", "attn_output", "post_attention_norm",
                                  "ffn_gate_inp", "exp_probs_b.bias", "ffn_gate_exps", "ffn_up_exps",
                                  "ffn_down_exps", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"],
                           lead_layer=["attn_norm", "attn_q", "attn_q.bias", "attn_k", "attn_k.bias", "attn_v",
                                       "attn_v.bias", "attn_q_norm", "attn_k_norm", "attn_output",
                                       "post_attention_norm", "ffn_gate", "ffn_up", "ffn_down"],
                           nextn_layer=NEXTN_LAYER,
                           sha256="2cf63998e122bcc9a6d33c659d9a2953c59740b29c6d25f62d0030ef50fca947"),
    # MiniMax M2 (minimax-m2): Q/K RMSNorm over the whole projection (every
    # head at once) before the heads are split, NeoX rope on half of each
    # head; 8 experts of 128 (top 2) in every layer by sigmoid with a
    # selection bias, always normalised, no shared expert. (llama.cpp sizes
    # the experts by feed_forward_length, which the real files set to the
    # expert's width.)
    "random-minimax-m2": dict(arch="minimax-m2", n_layer=3, rope_dim=32, rope_base=5e6, n_expert=8, n_expert_used=2,
                              n_ff=128, n_ff_exp=128, qk_norm_whole=True, routing=dict(gating=2),
                              layer=["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                                     "attn_output", "ffn_norm", "ffn_gate_inp", "exp_probs_b.bias", "ffn_gate_exps",
                                     "ffn_up_exps", "ffn_down_exps"],
                              sha256="50122c6c99b0237a8bd110f376c084d930ad543854fa1074bc077e0399bc4471"),
    # Llama 3.1: rope_freqs.weight divides the rotation frequencies.
    "random-llama3": dict(arch="llama", rope_base=5e5, rope_freqs=True,
                          layer=["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                                 "ffn_up", "ffn_down"],
                          sha256="c9fcc547eb5754e235b7544c524ed0e6055631245db39acb8c48450b62ca9aaf"),
}

# Gemma 4 (gemma4), as llama.cpp's converter lays out the 31B and 26B-A4B
# models: windowed layers (8 positions here) with heads of 64 over 2 KV
# heads, rope over all of them at base 1e4; global layers with heads of 128
# over 1 KV head, V taken from K's projection (no attn_v), and rope over a
# quarter of each head by rope_freqs (1e30 leaves the other pairs still,
# "proportional" rope) at base 1e6; V normalised without a weight; a scalar
# on each layer's output; the final logit soft-cap; q.k unscaled.
GEMMA4_LAYER = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output",
                "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm",
                "layer_output_scale"]
GEMMA4 = dict(arch="gemma4", head_dim=64, n_head_kv=2, rope_base=1e6, rope_base_swa=1e4, sliding_window=8,
              softcap=30.0, gemma4=dict(head_dim=128, n_head_kv=1, partial_rotary=0.25))
MODELS["random-gemma4"] = dict(GEMMA4, n_layer=6, window_pattern=[True] * 5 + [False], layer=GEMMA4_LAYER,
                               sha256="b34dd7e8006e3b5cd7ce65b78b4788fac9e451c83311211d18607abce2c06286")
# Its mixture of experts (26B-A4B's layout): beside the dense FFN, 8 experts
# of 128 (top 2, softmax, renormalised) with gate and up stacked in one
# tensor, a scale per expert's output, the router reading the layer's input
# normalised and scaled, and each branch's own norms.
MODELS["random-gemma4moe"] = dict(
    GEMMA4, n_layer=4, window_pattern=[True, True, False, True], n_expert=8, n_expert_used=2, n_ff_exp=128,
    layer=GEMMA4_LAYER[:-2] + ["post_ffw_norm_1", "ffn_gate_inp", "ffn_gate_inp.scale", "pre_ffw_norm_2",
                               "ffn_gate_up_exps", "ffn_down_exps", "ffn_down_exps.scale", "post_ffw_norm_2",
                               "post_ffw_norm", "layer_output_scale"],
    sha256="030a6e7f42f6dee6176d34cbf90e68ec413ac55f930c67c86d335017f7eaac33")

# Gemma 4 E2B/E4B's layout: each layer's own 24-value input (a token's rows
# in per_layer_token_embd plus a projection of its embedding, gated into the
# residual stream after the FFN), the last two layers reading the caches of
# layers 2 (windowed) and 3 (global) with no K or V of their own and an FFN
# twice as wide; V projected in every layer.
MODELS["random-gemma4e"] = dict(
    GEMMA4, n_layer=6, window_pattern=[True, False] * 3, ple=24, kv_shared=2, ff_shared=1024,
    layer=GEMMA4_LAYER[:-1] + ["inp_gate", "proj", "post_norm", "layer_output_scale"],
    sha256="f7a1564f60447a7f24882d5adc25d25ad75a215b19ab24694a0b837a05af6c3a")

# Qwen3 with YaRN as its long-context files declare it (factor 4), the
# original context cut to 128 so that the tests' 263-token prompt runs past it.
MODELS["random-qwen3-yarn"] = dict(MODELS["random-qwen3"], yarn=dict(factor=4.0, original_context_length=128),
                                   sha256="27718904d40333c0e1a4b5591ed8fbf386b3c3f4fe13f85d6320e4ff59dae93d")

# Qwen3 as convert_hf_to_gguf writes Qwen3-Reranker: pooling_type rank, the
# two labels' rows ("yes", "no") as cls.output.weight, a rerank template
# with {query} and {document} (its structure, written for the tests), and
# no BOS added.
RERANK_TEMPLATE = ("<|im_start|>system\nAnswer yes or no: does the document answer the query?<|im_end|>\n"
                   "<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n\n</think>\n\n")
MODELS["random-qwen3-reranker"] = dict(MODELS["random-qwen3"], rerank=True,
                                       sha256="9cf82778bd32cc7b1d64f1b9d1ea48915f05d3437e76a4a152a4d27593012afd")

# Qwen3-Next (qwen3next): Qwen3.5-MoE's layers with plain partial NeoX
# rope (no sections), each DeltaNet's beta and alpha in one projection
# (ssm_ba, grouped by key head) and value heads sharing key heads in runs
# (4 value heads over 2 key heads: 0 0 1 1, where Qwen3.5 reads 0 1 0 1).
MODELS["random-qwen3next"] = dict(
    {k: v for k, v in MODELS["random-qwen35moe"].items() if k != "rope_sections"}, arch="qwen3next", nextn=0,
    recurrent_layer=[{"ssm_beta": "ssm_ba"}.get(t, t) for t in MODELS["random-qwen35moe"]["recurrent_layer"]
                     if t != "ssm_alpha"],
    sha256="2de972312126939a9d1b1253d82a0d8db0273b6990b0b775c92eb330240035d1")

# gpt-oss as its files are: the experts' matrices in MXFP4, the rest F32.
MODELS["random-gpt-oss-mxfp4"] = dict(MODELS["random-gpt-oss"], expert_quant="MXFP4", sha256="ab32bb8bd9f5d4b214c8e04c9a6da89b9f70b61801c12ab0c47ad2ea43b71526")

# For bench/ (not made by default): a MoE model and a dense one with the same
# total bytes (8 experts of 1024 vs one FFN of 8192), Q8_0, so that the table
# shows a decode step reading only the experts it routes to.
BENCH = dict(n_embd=1024, n_head=16, n_head_kv=4, head_dim=64, n_layer=8, quant="Q8_0")
MODELS.update({
    "bench-qwen3moe": dict(BENCH, arch="qwen3moe", rope_base=1e6, n_expert=8, n_expert_used=2, n_ff_exp=1024,
                           layer=MODELS["random-qwen3moe"]["layer"],
                           sha256="13311d1c52b190610612a559a0257d85df6f862db6a4e81f4d46143636740377"),
    "bench-qwen3": dict(BENCH, arch="qwen3", rope_base=1e6, n_ff=8192, layer=MODELS["random-qwen3"]["layer"],
                        sha256="edb768292bee3a0cdfe0a642e6fbc33bcf8a28423bcbd5661d07977744febeea"),
})
# Qwen3.5 at ~0.5 B parameters (Qwen3.5-0.8B's shape but the vocabulary:
# 24 layers of width 1024, every fourth full attention, 16 DeltaNet heads
# of 128), Q8_0: prefill and decode beside llama.cpp (docs/benchmarks.md).
MODELS["bench-qwen35"] = dict(
    MODELS["random-qwen35"], n_embd=1024, n_layer=24, n_head=8, n_head_kv=2, head_dim=256, n_ff=3584, rope_dim=64,
    rope_sections=[11, 11, 10, 0], full_attention_interval=4, quant="Q8_0", nextn=0,
    ssm=dict(conv_kernel=4, state_size=128, group_count=16, time_step_rank=16), sha256="75d5532de4536f004048073eb4732d7f337ee390756a76d795bef49333f91b49")
# The same with its multi-token-prediction block: --spec-type mtp beside
# llama.cpp's draft-mtp (bench/compare_mtp.sh).
MODELS["bench-qwen35-mtp"] = dict(MODELS["bench-qwen35"], nextn=1, sha256="e74cbf0b691c178d99f35774e422b3c15a74699e88b639085c24a050e2adfe0f")
# gpt-oss at ~0.4 B parameters (8 layers of width 1024, 16/4 heads of 64,
# 16 experts of 1024, top 4), its experts in MXFP4 and the rest Q8_0, as
# the real files mix them.
MODELS["bench-gpt-oss"] = dict(
    MODELS["random-gpt-oss"], n_embd=1024, n_layer=8, n_head=16, n_head_kv=4, head_dim=64, n_expert=16,
    n_expert_used=4, n_ff_exp=1024, quant="Q8_0", expert_quant="MXFP4", sha256="c14d7b6cc5c0ec09fcaa8c164b99e6f3c3181738b95a6bc6fec94a92e70eb56a")
# Qwen3.5-MoE at ~0.45 B parameters (12 layers of width 1024, every fourth
# full attention, 16 DeltaNet heads of 128; 16 experts of 512, top 4, and
# a shared expert of 512), Q8_0.
MODELS["bench-qwen35moe"] = dict(
    MODELS["random-qwen35moe"], n_embd=1024, n_layer=12, n_head=8, n_head_kv=2, head_dim=256, rope_dim=64,
    rope_sections=[11, 11, 10, 0], full_attention_interval=4, n_expert=16, n_expert_used=4, n_ff_exp=512,
    n_ff_shexp=512, quant="Q8_0", nextn=0, ssm=dict(conv_kernel=4, state_size=128, group_count=16, time_step_rank=16),
    sha256="7221ebcd40cf5749ffa353b8eb372901da20722fb4ccc669280139bdc32a76f4")
# DeepSeek V3's design at ~0.47 B parameters (16 layers of width 1024, the
# first dense; 16 heads of 64 nope + 32 rope values over a latent of 256,
# query rank 384, values of 64; 16 experts of 512, top 4 from the best 2 of
# 4 groups, and a shared one), Q8_0.
MODELS["bench-deepseek2"] = dict(
    MODELS["random-deepseek2"], n_embd=1024, n_layer=16, n_head=16, head_dim=288, n_ff=2816, n_expert=16,
    n_expert_used=4, n_ff_exp=512, quant="Q8_0", nextn=0,
    mla=dict(q_lora_rank=384, kv_lora_rank=256, qk_nope=64, v_head_dim=64),
    sha256="c33507d92b466d751d9d4e44d2c9b1ac1dc75c6a0f468e7297c0161b7b8e8e09")
# Qwen3.6 27B's attention and DeltaNet shapes (width 5120, 24/4 heads of 256,
# rope over 64; DeltaNets of 16 key and 48 value heads of 128, every fourth
# layer full attention) in four layers with a narrower FFN (4096), Q8_0: where
# a prompt's time goes at a real model's state size (48 x 128 x 128 a layer).
MODELS["bench-qwen35-27b-heads"] = dict(
    MODELS["random-qwen35"], n_embd=5120, n_layer=4, n_head=24, n_head_kv=4, head_dim=256, n_ff=4096, rope_dim=64,
    rope_sections=[11, 11, 10, 0], full_attention_interval=4, quant="Q8_0", nextn=0,
    ssm=dict(conv_kernel=4, state_size=128, group_count=16, time_step_rank=48), sha256="8aa3ed17a4a8ba0fbff5881d293455c790e80dd00040fc5855cdf5593eec2a37")
# The families of late 2026 at ~0.45 B parameters each, Q8_0: Qwen3-Next's
# layers (12 of width 1024, every fourth full attention over 8/2 heads of
# 256; DeltaNets of 8 key and 16 value heads of 128, in runs; 16 experts of
# 512, top 4, and a shared one), GLM-4.5's (16 layers, 8/2 heads of 128 with
# biases and Q/K norms, the first dense, then 16 experts of 512, top 4, and a
# shared one) and MiniMax M2's (12 layers, 16/4 heads of 64 with norms over
# the whole projection, 16 experts of 512, top 4).
MODELS["bench-qwen3next"] = dict(
    MODELS["random-qwen3next"], n_embd=1024, n_layer=12, n_head=8, n_head_kv=2, head_dim=256, rope_dim=64,
    full_attention_interval=4, n_expert=16, n_expert_used=4, n_ff_exp=512, n_ff_shexp=512, quant="Q8_0",
    ssm=dict(conv_kernel=4, state_size=128, group_count=8, time_step_rank=16), sha256="1753b518e19114f6e8b169177e38d595521e6e67c456b07b4a84e0b19b664c43")
MODELS["bench-glm4moe"] = dict(
    MODELS["random-glm4moe"], n_embd=1024, n_layer=16, n_head=8, n_head_kv=2, head_dim=128, rope_dim=64,
    n_ff=2816, n_expert=16, n_expert_used=4, n_ff_exp=512, nextn=0, quant="Q8_0", sha256="c45940e248a945b96aa9ac3ef740d5f79b5c7126f54ff06fdd16ff2fbc2625a2")
MODELS["bench-minimax-m2"] = dict(
    MODELS["random-minimax-m2"], n_embd=1024, n_layer=12, n_head=16, n_head_kv=4, head_dim=64, rope_dim=32,
    n_ff=512, n_expert=16, n_expert_used=4, n_ff_exp=512, quant="Q8_0", sha256="9930eb7760e1d260108e88e107f2204aa3d69a8b52ff2852ba20d7e3564bf965")
# Gemma 4 at ~0.4 B parameters each, Q8_0: the 31B's layout (24 layers of
# width 1024, every sixth global; windowed heads of 128 over 4 KV heads,
# global heads of 256 over 1, V from K; a 1024-token window; FFN 4096) and
# the 26B-A4B's (10 such layers with a dense FFN of 768 beside 32 experts of
# 384, top 4).
MODELS["bench-gemma4"] = dict(
    MODELS["random-gemma4"], n_embd=1024, n_layer=24, window_pattern=([True] * 5 + [False]) * 4, n_head=8,
    head_dim=128, n_head_kv=4, gemma4=dict(head_dim=256, n_head_kv=1, partial_rotary=0.25), sliding_window=1024,
    n_ff=4096, quant="Q8_0", sha256="954da1bfc215e84cebc6e74868660ebef751fc99f418f6d0ce7861fb8214ce7b")
MODELS["bench-gemma4moe"] = dict(
    MODELS["random-gemma4moe"], n_embd=1024, n_layer=10, window_pattern=[True] * 5 + [False] + [True] * 3 + [False],
    n_head=8, head_dim=128, n_head_kv=4, gemma4=dict(head_dim=256, n_head_kv=1, partial_rotary=0.25),
    sliding_window=1024, n_ff=768, n_expert=32, n_expert_used=4, n_ff_exp=384, quant="Q8_0",
    sha256="6377b58bb9176635cff1df27ffb2f5dc46d4c5bd6f22db39adfaa83170bdc837")
# And E2B/E4B's (24 such layers, each with its own input of 256 values, the
# last 6 reading the caches of layers 16 and 17 with an FFN twice as wide).
MODELS["bench-gemma4e"] = dict(
    MODELS["random-gemma4e"], n_embd=1024, n_layer=24, window_pattern=([True] * 5 + [False]) * 4, n_head=8,
    head_dim=128, n_head_kv=4, gemma4=dict(head_dim=256, n_head_kv=1, partial_rotary=0.25), sliding_window=1024,
    n_ff=4096, ff_shared=8192, kv_shared=6, ple=256, quant="Q8_0",
    sha256="fdd7f97c79f42d97e1990fe3276b6c9adee3e7def9efe62894d6801c14c167a9")
TEST_MODELS = [name for name in MODELS if name.startswith("random-")]


def uniform(name, shape, scale):
    """Uniform in [-scale, scale), from a seed that depends only on the name."""
    rng = np.random.Generator(np.random.PCG64(zlib.crc32(name.encode())))
    return ((rng.random(shape) * 2.0 - 1.0) * scale).astype(np.float32)


def llama3_rope_freqs(head_dim, base):
    # The factors convert_hf_to_gguf.py computes for Llama 3.1 (factor 8,
    # low/high frequency factors 1 and 4, original context 8192).
    factor, low, high, old_ctx = 8.0, 1.0, 4.0, 8192
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def layer_tensor(m, name):
    """(numpy shape, scale) of a layer tensor; numpy shape = GGUF shape reversed.
    A scale of None: a norm (1 + uniform 0.2); a tuple: (low, high) uniform."""
    e, q, kv, ff = m["n_embd"], m["n_head"] * m["head_dim"], m["n_head_kv"] * m["head_dim"], m["n_ff"]
    x, ffx = m.get("n_expert", 0), m.get("n_ff_exp", ff)
    norm = lambda n: ((n,), None)
    qp = 2 * q if m.get("q_gate") else q  # Q and its output gate, head by head
    shexp = m.get("n_ff_shexp", m.get("n_shared", 0) * ffx) or 1
    mla = m.get("mla")
    if mla:
        h, rope, lat, nope, vh = m["n_head"], m["rope_dim"], mla["kv_lora_rank"], mla["qk_nope"], mla["v_head_dim"]
        extra = {
            "attn_q_a": ((mla["q_lora_rank"], e), e), "attn_q_a_norm": norm(mla["q_lora_rank"]),
            "attn_q_b": ((h * (nope + rope), mla["q_lora_rank"]), mla["q_lora_rank"]),
            "attn_kv_a_mqa": ((lat + rope, e), e), "attn_kv_a_norm": norm(lat),
            "attn_k_b": ((h, lat, nope), nope), "attn_v_b": ((h, vh, lat), lat),
            "attn_output": ((e, h * vh), h * vh),
        }
        if name in extra:
            return extra[name]
    ssm = m.get("ssm")
    if ssm:
        hs, hk, hv = ssm["state_size"], ssm["group_count"], ssm["time_step_rank"]
        conv = 2 * hs * hk + hs * hv  # q, k (key heads) and v (value heads)
        extra = {
            "attn_qkv": ((conv, e), e), "attn_gate": ((hs * hv, e), e),
            "ssm_conv1d": ((conv, ssm["conv_kernel"]), ssm["conv_kernel"]),
            # alpha + dt through softplus times a (< 0): each head's decay
            # per token, exp(g), lands between ~0.2 and ~0.95.
            "ssm_dt": ((hv,), (-2.0, 0.0)), "ssm_a": ((hv,), (-1.0, -0.1)),
            "ssm_beta": ((hv, e), e), "ssm_alpha": ((hv, e), e), "ssm_norm": norm(hs),
            "ssm_ba": ((2 * hv, e), e),
            "ssm_out": ((e, hs * hv), hs * hv),
        }
        if name in extra:
            return extra[name]
    whole = m.get("qk_norm_whole")  # the Q/K norms span every head (minimax-m2)
    return {
        "attn_norm": norm(e), "ffn_norm": norm(e), "post_attention_norm": norm(e), "post_ffw_norm": norm(e),
        "attn_q_norm": norm(q if whole else m["head_dim"]), "attn_k_norm": norm(kv if whole else m["head_dim"]),
        # A multi-token-prediction block's own tensors (glm4moe's nextn).
        "nextn.eh_proj": ((e, 2 * e), 2 * e), "nextn.enorm": norm(e), "nextn.hnorm": norm(e),
        "nextn.shared_head_norm": norm(e),
        "attn_q": ((qp, e), e), "attn_k": ((kv, e), e), "attn_v": ((kv, e), e), "attn_output": ((e, q), q),
        "ffn_gate": ((ff, e), e), "ffn_up": ((ff, e), e), "ffn_down": ((e, ff), ff),
        "ffn_gate_inp": ((x, e), e), "ffn_gate_inp_shexp": ((e,), e),
        # A selection bias the size of the sigmoid's spread: it changes choices.
        "exp_probs_b.bias": ((x,), (-0.3, 0.3)),
        # gpt-oss's biases and sinks (a sink's logit is comparable to a score's).
        "attn_q.bias": ((qp,), (-0.5, 0.5)), "attn_k.bias": ((kv,), (-0.5, 0.5)), "attn_v.bias": ((kv,), (-0.5, 0.5)),
        "attn_output.bias": ((e,), (-0.2, 0.2)), "attn_sinks": ((m["n_head"],), (-1.0, 2.0)),
        "ffn_gate_inp.bias": ((x,), (-0.5, 0.5)), "ffn_gate_exps.bias": ((x, ffx), (-0.5, 0.5)),
        "ffn_up_exps.bias": ((x, ffx), (-0.5, 0.5)), "ffn_down_exps.bias": ((x, e), (-0.2, 0.2)),
        "ffn_gate_shexp": ((shexp, e), e), "ffn_up_shexp": ((shexp, e), e), "ffn_down_shexp": ((e, shexp), shexp),
        "ffn_gate_exps": ((x, ffx, e), e), "ffn_up_exps": ((x, ffx, e), e), "ffn_down_exps": ((x, e, ffx), ffx),
        # Gemma 4's: gate and up stacked per expert, each expert's output
        # scale, the router's input scale, the branches' norms, the layer's scalar.
        "ffn_gate_up_exps": ((x, 2 * ffx, e), e), "ffn_down_exps.scale": ((x,), (0.5, 1.5)),
        "ffn_gate_inp.scale": ((e,), (0.5, 1.5)), "pre_ffw_norm_2": norm(e), "post_ffw_norm_1": norm(e),
        "post_ffw_norm_2": norm(e), "layer_output_scale": ((1,), (0.5, 1.0)),
        # Gemma 4 E2B/E4B's per-layer input: the gate to it, the projection back, its norm.
        "inp_gate": ((m.get("ple", 1), e), e), "proj": ((e, m.get("ple", 1)), m.get("ple", 1)), "post_norm": norm(e),
    }[name]


def write(name, path):
    m = dict(BASE, **MODELS[name])
    arch = m["arch"]
    src = gguf.GGUFReader(str(TOKENIZER_SOURCE))
    tokens = [bytes(src.fields["tokenizer.ggml.tokens"].parts[i]) for i in src.fields["tokenizer.ggml.tokens"].data]
    scores = [float(src.fields["tokenizer.ggml.scores"].parts[i][0]) for i in src.fields["tokenizer.ggml.scores"].data]
    types = [int(src.fields["tokenizer.ggml.token_type"].parts[i][0])
             for i in src.fields["tokenizer.ggml.token_type"].data]
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    # Multi-token-prediction blocks follow the model's own and count in block_count.
    w.add_uint32(f"{arch}.block_count", m["n_layer"] + m.get("nextn", 0))
    if m.get("nextn"):
        w.add_uint32(f"{arch}.nextn_predict_layers", m["nextn"])
    w.add_uint32(f"{arch}.context_length", m["ctx"])
    w.add_uint32(f"{arch}.embedding_length", m["n_embd"])
    if "ff_shared" in m:  # one width per layer: the layers that reuse a cache have their own
        shared_from = m["n_layer"] - m["kv_shared"]
        w.add_array(f"{arch}.feed_forward_length",
                    [m["ff_shared"] if l >= shared_from else m["n_ff"] for l in range(m["n_layer"])])
    else:
        w.add_uint32(f"{arch}.feed_forward_length", m["n_ff"])
    w.add_uint32(f"{arch}.attention.head_count", m["n_head"])
    g4 = m.get("gemma4")
    if g4:
        # The global layers' head size and rope are the main keys, the
        # windowed layers' the _swa ones; KV heads one per layer.
        pattern = m["window_pattern"]
        w.add_array(f"{arch}.attention.head_count_kv", [m["n_head_kv"] if p else g4["n_head_kv"] for p in pattern])
        w.add_uint32(f"{arch}.attention.key_length", g4["head_dim"])
        w.add_uint32(f"{arch}.attention.value_length", g4["head_dim"])
        w.add_uint32(f"{arch}.attention.key_length_swa", m["head_dim"])
        w.add_uint32(f"{arch}.attention.value_length_swa", m["head_dim"])
        w.add_uint32(f"{arch}.rope.dimension_count", g4["head_dim"])
        w.add_uint32(f"{arch}.rope.dimension_count_swa", m["head_dim"])
        w.add_array(f"{arch}.attention.sliding_window_pattern", pattern)
        w.add_uint32(f"{arch}.attention.shared_kv_layers", m.get("kv_shared", 0))
        w.add_uint32(f"{arch}.embedding_length_per_layer_input", m.get("ple", 0))
    else:
        w.add_uint32(f"{arch}.attention.head_count_kv", m["n_head_kv"])
    if not g4:
        w.add_uint32(f"{arch}.attention.key_length", m["head_dim"])
    mla = m.get("mla")
    if not g4:
        w.add_uint32(f"{arch}.attention.value_length", mla["kv_lora_rank"] if mla else m["head_dim"])
    if mla:  # llama.cpp's keys for latent attention
        w.add_uint32(f"{arch}.attention.q_lora_rank", mla["q_lora_rank"])
        w.add_uint32(f"{arch}.attention.kv_lora_rank", mla["kv_lora_rank"])
        w.add_uint32(f"{arch}.attention.key_length_mla", mla["qk_nope"] + m["rope_dim"])
        w.add_uint32(f"{arch}.attention.value_length_mla", mla["v_head_dim"])
        w.add_uint32(f"{arch}.leading_dense_block_count", m["n_dense_lead"])
    elif "n_dense_lead" in m:
        w.add_uint32(f"{arch}.leading_dense_block_count", m["n_dense_lead"])
    if "routing" in m:
        r = m["routing"]
        if "n_shared" in m:
            w.add_uint32(f"{arch}.expert_shared_count", m["n_shared"])
        w.add_uint32(f"{arch}.expert_gating_func", r["gating"])
        if "norm" in r:
            w.add_bool(f"{arch}.expert_weights_norm", r["norm"])
        if "scale" in r:
            w.add_float32(f"{arch}.expert_weights_scale", r["scale"])
        if "groups" in r:
            w.add_uint32(f"{arch}.expert_group_count", r["groups"])
            w.add_uint32(f"{arch}.expert_group_used_count", r["groups_used"])
    if not g4:
        w.add_uint32(f"{arch}.rope.dimension_count", m.get("rope_dim", m["head_dim"]))
    if "yarn" in m:
        w.add_string(f"{arch}.rope.scaling.type", "yarn")
        w.add_float32(f"{arch}.rope.scaling.factor", m["yarn"]["factor"])
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", m["yarn"]["original_context_length"])
        if "log_multiplier" in m["yarn"]:
            w.add_float32(f"{arch}.rope.scaling.yarn_log_multiplier", m["yarn"]["log_multiplier"])
    if "rope_sections" in m:
        w.add_array(f"{arch}.rope.dimension_sections", m["rope_sections"])
    if "full_attention_interval" in m:
        w.add_uint32(f"{arch}.full_attention_interval", m["full_attention_interval"])
    if "ssm" in m:
        ssm = m["ssm"]
        w.add_uint32(f"{arch}.ssm.conv_kernel", ssm["conv_kernel"])
        w.add_uint32(f"{arch}.ssm.state_size", ssm["state_size"])
        w.add_uint32(f"{arch}.ssm.group_count", ssm["group_count"])
        w.add_uint32(f"{arch}.ssm.time_step_rank", ssm["time_step_rank"])
        w.add_uint32(f"{arch}.ssm.inner_size", ssm["state_size"] * ssm["time_step_rank"])
    w.add_float32(f"{arch}.rope.freq_base", m.get("rope_base", 1e4))
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    if "sliding_window" in m:
        w.add_uint32(f"{arch}.attention.sliding_window", m["sliding_window"])
        if "rope_base_swa" in m:
            w.add_float32(f"{arch}.rope.freq_base_swa", m["rope_base_swa"])
    if "softcap" in m:
        w.add_float32(f"{arch}.final_logit_softcapping", m["softcap"])
    if m.get("n_expert"):
        w.add_uint32(f"{arch}.expert_count", m["n_expert"])
        w.add_uint32(f"{arch}.expert_used_count", m["n_expert_used"])
        if "n_ff_exp" in m:
            w.add_uint32(f"{arch}.expert_feed_forward_length", m["n_ff_exp"])
        if "n_ff_shexp" in m:
            w.add_uint32(f"{arch}.expert_shared_feed_forward_length", m["n_ff_shexp"])
    w.add_tokenizer_model("llama")
    if "chat_template" in m:
        w.add_chat_template(m["chat_template"])
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    for key in ("bos_token_id", "eos_token_id", "unknown_token_id"):
        w.add_uint32(f"tokenizer.ggml.{key}", int(src.fields[f"tokenizer.ggml.{key}"].parts[-1][0]))
    if m.get("rerank"):
        w.add_pooling_type(gguf.PoolingType.RANK)
        w.add_classifier_output_labels(["yes", "no"])
        w.add_string("tokenizer.chat_template.rerank", RERANK_TEMPLATE)
        w.add_bool("tokenizer.ggml.add_bos_token", False)

    def add_matrix(name, data):
        quant = m.get("quant")
        if m.get("expert_quant") and name.endswith("_exps.weight"):
            quant = m["expert_quant"]
        if quant is None:
            return w.add_tensor(name, data)
        kind = getattr(gguf.GGMLQuantizationType, quant)
        w.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)

    e = m["n_embd"]
    add_matrix("token_embd.weight", uniform("token_embd", (n_vocab, e), 1.0))
    w.add_tensor("output_norm.weight", 1.0 + uniform("output_norm", (e,), 0.2))
    add_matrix("output.weight", uniform("output", (n_vocab, e), 3.0 / np.sqrt(e)))
    if m.get("rope_freqs"):
        w.add_tensor("rope_freqs.weight", llama3_rope_freqs(m["head_dim"], m["rope_base"]))
    if m.get("ple"):  # each token's rows for every layer, the projection of its embedding to them, their norm
        width = m["ple"] * m["n_layer"]
        add_matrix("per_layer_token_embd.weight", uniform("per_layer_token_embd", (n_vocab, width), 1.0))
        add_matrix("per_layer_model_proj.weight", uniform("per_layer_model_proj", (width, e), 1.7 / np.sqrt(e)))
        w.add_tensor("per_layer_proj_norm.weight", 1.0 + uniform("per_layer_proj_norm", (m["ple"],), 0.2))
    if g4:  # proportional rope: the pairs past partial_rotary of the head stay still
        pairs, turning = g4["head_dim"] // 2, int(g4["head_dim"] * g4["partial_rotary"] / 2)
        w.add_tensor("rope_freqs.weight", np.array([1.0] * turning + [1e30] * (pairs - turning), dtype=np.float32))
    if m.get("rerank"):
        w.add_tensor("cls.output.weight", uniform("cls.output", (2, e), 3.0 / np.sqrt(e)))
    interval = m.get("full_attention_interval", 0)
    for l in range(m["n_layer"] + m.get("nextn", 0)):
        recurrent = interval > 0 and (l + 1) % interval != 0 and l < m["n_layer"]
        lead = l < m.get("n_dense_lead", 0)
        # An MTP block: a layer of experts and its own projection and norms.
        mtp = m["layer"] + m["nextn_layer"] if l >= m["n_layer"] else None
        tensors = mtp or (m["recurrent_layer"] if recurrent else m["lead_layer"] if lead else m["layer"])
        shapes = m
        if g4 and not m["window_pattern"][l]:  # a global layer: its geometry, V from K (unless E2B/E4B's)
            shapes = dict(m, head_dim=g4["head_dim"], n_head_kv=g4["n_head_kv"])
            if not m.get("ple"):
                tensors = [t for t in tensors if t != "attn_v"]
        if g4 and l >= m["n_layer"] - m.get("kv_shared", 0):  # reads an earlier cache: no K or V; a wider FFN
            shapes = dict(shapes, n_ff=m["ff_shared"])
            tensors = [t for t in tensors if t not in ("attn_k", "attn_v", "attn_k_norm")]
        for t in tensors:
            shape, fan_in = layer_tensor(shapes, t)
            full = f"blk.{l}.{t}"
            # llama.cpp's names: ssm_a has no suffix, ssm_dt is a bias; a name
            # with its suffix (attn_q.bias) is taken as it is.
            suffix = "" if t.endswith((".bias", ".weight", ".scale")) else {"ssm_a": "", "ssm_dt": ".bias"}.get(t, ".weight")
            if fan_in is None:
                w.add_tensor(full + suffix, 1.0 + uniform(full, shape, 0.2))
            elif isinstance(fan_in, tuple):
                low, high = fan_in
                w.add_tensor(full + suffix, low + (high - low) * (uniform(full, shape, 0.5) + 0.5))
            elif len(shape) == 1 or t == "ssm_conv1d":  # read as floats by llama.cpp's ops
                w.add_tensor(full + suffix, uniform(full, shape, 1.7 / np.sqrt(fan_in)))
            else:
                add_matrix(full + suffix, uniform(full, shape, 1.7 / np.sqrt(fan_in)))
    finish(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--print-hashes", action="store_true", help="write the files and print their sha256 (to update)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    if args.list:
        print("\n".join(MODELS))  # the bench- ones only when named
        return 0
    default = Path(os.environ.get("SHOAL_MODELS_DIR", Path.home() / ".cache" / "shoal" / "models")) / "random"
    out_dir = Path(args.dir) if args.dir else default
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.names or TEST_MODELS:
        if name not in MODELS:
            print(f"error: unknown model '{name}' (known: {', '.join(MODELS)})", file=sys.stderr)
            return 2
        path = out_dir / f"{name}.gguf"
        if not make_pinned(name, path, MODELS[name]["sha256"], lambda tmp: write(name, tmp), args.print_hashes):
            failed = True
            continue
        print(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

