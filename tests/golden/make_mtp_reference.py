#!/usr/bin/env python3
"""Reference drafts of a model's own multi-token-prediction (MTP, "nextn")
head, from llama.cpp 0c1e570 (the one in llama-cpp-python 0.3.36's sdist).

Not run by CI. It needs the environment of make_reference.py, with
LLAMA_CPP_LIB_PATH pointing at the bin/ of a -DBUILD_SHARED_LIBS=ON build of
that llama.cpp (the MTP staging calls of src/llama-ext.h are exported by
libllama but not bound in Python, so they are declared here). From the repo root:

    LLAMA_CPP_LIB_PATH=~/.cache/shoal/llama.cpp-build/bin \\
        ~/.cache/shoal/refenv/bin/python tests/golden/make_mtp_reference.py [NAME ...]

Writes tests/golden/mtp/<name>.json for each random model with one MTP block
(default: all of CASES). It drives the draft as common/speculative.cpp's
common_speculative_impl_draft_mtp does, on the "fox" prompt x_0..x_{P-1}:
  1. target context (h_nextn unmasked: one hidden row h_p per batch row)
     decodes the prompt in one batch; x_P = argmax of the last row's logits;
  2. catch-up (process()): the MTP context (ctx_type MTP, ctx_other = target,
     h_nextn masked) decodes P rows, row p = token x_p at position p with
     h_{p-1} (h_{-1} = zeros), no outputs;
  3. draft(): row x_P at position P with h_{P-1}, output on -> logits, d1 and
     the MTP's own hidden row g_1; then d_k at position P+k with g_k -> d_{k+1}.
Greedy, CPU, f32 KV cache, no flash attention; run with 1 and 2 threads,
which must agree (their largest first-step logit difference is recorded).

JSON: model, source, prompt, prompt_tokens, next_token (x_P),
mtp_first_logits (all n_vocab logits of step 1, 7 significant digits),
mtp_draft [d1..d4], mtp_draft_max_logit (each step's largest logit),
threads_checked, max_diff_1_vs_2_threads.
"""
import ctypes
import json
import sys
from pathlib import Path

import llama_cpp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_reference import OUT, PROMPTS, ROOT, model_path  # noqa: E402

SOURCE = "llama.cpp 0c1e570 (llama-cpp-python 0.3.36 sdist), common/speculative.cpp draft-mtp"
CASES = ["random-qwen35", "random-qwen35moe", "random-glm4moe"]
N_DRAFT = 4
THREADS = [1, 2]

# src/llama-ext.h: exported, not in the bindings, and C++ (no extern "C"),
# so libllama has them under their Itanium-mangled names.
_lib = llama_cpp.llama_cpp._lib
_f = ctypes.POINTER(ctypes.c_float)
set_nextn = _lib["_Z26llama_set_embeddings_nextnP13llama_contextbb"]
set_nextn.argtypes, set_nextn.restype = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None
get_nextn = _lib["_Z26llama_get_embeddings_nextnP13llama_context"]
get_nextn.argtypes, get_nextn.restype = [ctypes.c_void_p], _f
get_nextn_ith = _lib["_Z30llama_get_embeddings_nextn_ithP13llama_contexti"]
get_nextn_ith.argtypes, get_nextn_ith.restype = [ctypes.c_void_p, ctypes.c_int32], _f

def ctx_params(n_threads, mtp_of=None):
    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch = 512, 512, 512
    p.n_threads = p.n_threads_batch = n_threads
    p.type_k = p.type_v = llama_cpp.GGML_TYPE_F32
    p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    p.no_perf = True
    if mtp_of is not None:  # as common_speculative_init_result does for --spec-type mtp
        p.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        p.n_rs_seq = 0
        p.ctx_other = mtp_of
    return p


def process(ctx, batch, rows):
    """rows: [(token, pos, hidden row or None, output)] -> llama_process(DECODE)."""
    llama_cpp.llama_batch_ext_clear(batch)
    for tok, pos, h, out in rows:
        idx = llama_cpp.llama_batch_ext_add_token(batch, 0, tok)
        # 4 positions: enough for M-RoPE models; text tokens read only the first.
        llama_cpp.llama_batch_ext_set_pos(batch, idx, (llama_cpp.llama_pos * 4)(pos, 0, 0, 0))
        if h is not None:  # the batch copies the row
            e = llama_cpp.llama_embd(h.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, h.size)
            assert llama_cpp.llama_batch_ext_set_embd_token(batch, idx, e)
        llama_cpp.llama_batch_ext_set_output_logits(batch, idx, out)
    rc = llama_cpp.llama_process(ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
    if rc != 0:
        raise RuntimeError(f"llama_process returned {rc}")


def tokenize(model, text):
    # As make_reference.py (Llama.tokenize(add_bos=True, special=True)).
    vocab = llama_cpp.llama_model_get_vocab(model)
    buf = (llama_cpp.llama_token * 4096)()
    n = llama_cpp.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, len(buf), True, True)
    assert n > 0
    return list(buf[:n])


def run(model, toks, n_threads):
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    n_embd = llama_cpp.llama_model_n_embd_out(model)
    ctx_tgt = llama_cpp.llama_init_from_model(model, ctx_params(n_threads))
    ctx_dft = llama_cpp.llama_init_from_model(model, ctx_params(n_threads, mtp_of=ctx_tgt))
    if not ctx_tgt or not ctx_dft:
        raise RuntimeError("llama.cpp refused the target or the MTP context")
    set_nextn(ctx_tgt, True, False)
    set_nextn(ctx_dft, True, True)
    b_tgt, b_dft = llama_cpp.llama_batch_ext_init(ctx_tgt), llama_cpp.llama_batch_ext_init(ctx_dft)
    P = len(toks)

    # 1. target prefill: every row's h_p, logits of the last.
    process(ctx_tgt, b_tgt, [(t, p, None, p == P - 1) for p, t in enumerate(toks)])
    h = np.ctypeslib.as_array(get_nextn(ctx_tgt), (P, n_embd)).copy()
    tgt_logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx_tgt, P - 1), (n_vocab,))
    x_P = int(np.argmax(tgt_logits))

    # 2. catch-up: x_p at p paired with h_{p-1} (zeros before the first).
    h_prev = np.vstack([np.zeros((1, n_embd), np.float32), h[:-1]])
    process(ctx_dft, b_dft, [(t, p, h_prev[p], False) for p, t in enumerate(toks)])

    # 3. draft: x_P at P with h_{P-1}; then each draft at the next position
    # with the MTP's own hidden row of the step before.
    tok, row, first, drafts, maxes = x_P, h[P - 1], None, [], []
    for k in range(N_DRAFT):
        process(ctx_dft, b_dft, [(tok, P + k, row, True)])
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx_dft, 0), (n_vocab,)).copy()
        row = np.ctypeslib.as_array(get_nextn_ith(ctx_dft, 0), (n_embd,)).copy()
        if first is None:
            first = logits
        tok = int(np.argmax(logits))  # lowest id on ties, as top-k 1
        drafts.append(tok)
        maxes.append(float(logits.max()))

    for b in (b_tgt, b_dft):
        llama_cpp.llama_batch_ext_free(b)
    llama_cpp.llama_free(ctx_dft)
    llama_cpp.llama_free(ctx_tgt)
    return x_P, first, drafts, maxes


def make(name):
    path = model_path(name)
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.load_mtp = True
    model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path} with load_mtp")
    prompt = PROMPTS["fox"][1]
    toks = tokenize(model, prompt)
    runs = {n: run(model, toks, n) for n in THREADS}
    llama_cpp.llama_model_free(model)

    x_P, first, drafts, maxes = runs[THREADS[0]]
    diff = max(float(np.max(np.abs(r[1] - first))) for r in runs.values())
    for n, r in runs.items():
        if (r[0], r[2]) != (x_P, drafts):
            raise RuntimeError(f"{name}: {n} threads give other tokens: {r[0]} {r[2]} vs {x_P} {drafts}")
    # Sanity: the MTP head must give a real distribution, not a constant/NaN.
    assert np.all(np.isfinite(first)) and np.ptp(first) > 0, f"{name}: degenerate MTP logits"
    top5 = np.argsort(-first, kind="stable")[:5]
    print(f"{name}: next {x_P}, draft {drafts}, top5 of step 1 "
          f"{[(int(i), round(float(first[i]), 4)) for i in top5]}, 1 vs 2 threads {diff:.2e}")
    gold = OUT / f"{name}.fox.json"  # the plain reference's first token must match x_P
    if gold.exists() and json.loads(gold.read_text())["steps"][0]["token"] != x_P:
        print(f"warning: {gold.name} starts with another token than {x_P}")
    return {
        "model": name, "source": SOURCE, "prompt": prompt, "prompt_tokens": toks,
        "next_token": x_P,
        "mtp_first_logits": [float(f"{v:.7g}") for v in first],
        "mtp_draft": drafts, "mtp_draft_max_logit": [round(m, 6) for m in maxes],
        "threads_checked": THREADS, "max_diff_1_vs_2_threads": diff,
    }


@llama_cpp.llama_log_callback
def _quiet(level, text, user_data):  # llama.cpp's log, as make_reference.py's verbose=False
    pass


def main():
    llama_cpp.llama_log_set(_quiet, None)
    llama_cpp.llama_backend_init()
    for name in sys.argv[1:] or CASES:
        out = OUT / "mtp" / f"{name}.json"
        out.write_text(json.dumps(make(name)) + "\n")
        print(f"{out.relative_to(ROOT)} written")


if __name__ == "__main__":
    main()
