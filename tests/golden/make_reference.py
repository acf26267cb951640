#!/usr/bin/env python3
"""Reference outputs for the real GGUF test models, from llama.cpp.

Not run by CI: it needs llama-cpp-python (which compiles llama.cpp) and the
models from scripts/fetch-models. Its outputs, tests/golden/<model>.<prompt>.json,
are committed. Setup (once, outside the repo) and run, from the repo root:

    python3 -m venv ~/.cache/shoal/refenv
    CMAKE_BUILD_PARALLEL_LEVEL=2 ~/.cache/shoal/refenv/bin/pip install llama-cpp-python==0.3.36
    ~/.cache/shoal/refenv/bin/python tests/golden/make_reference.py            # write the JSON files
    ~/.cache/shoal/refenv/bin/python tests/golden/make_reference.py --noise    # llama.cpp's own noise

Or, without compiling llama.cpp a second time: a venv with
--system-site-packages and `pip install diskcache`, the sdist's directory
(llama_cpp_python-0.3.36) on its path (a .pth file), and
LLAMA_CPP_LIB_PATH pointing at the bin/ of a -DBUILD_SHARED_LIBS=ON build
of the same llama.cpp (docs/benchmarks.md); the references of 2026-12-07
(qwen3next, glm4moe, minimax-m2) came so, and it reproduces the older
files' tokens with logits within 5e-6.

Arguments: model ids (default: all below); --noise prints, instead of writing
files, how much llama.cpp's logits move with 1 instead of 2 threads and with
the prompt fed in 16-token batches instead of one, and with an f16 instead
of f32 KV cache (a tiny perturbation: shows how much the model amplifies
rounding), along the same (golden) token path.

JSON format: as tests/data/golden/README.md describes (model, prompt,
prompt_tokens, steps[{token, piece, top[[id, logit] x10]}], text), plus
"reference". Greedy, up to 32 steps; a step that picks an end-of-generation
token (e.g. <|im_end|>) is recorded and ends the run, as generation would.
"""
import json
import subprocess
import sys
from pathlib import Path

import jinja2.sandbox
import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden"
N_STEPS = 32
N_TOP = 10
REFERENCE = f"llama.cpp via llama-cpp-python {llama_cpp.__version__}"

LONG = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, "
        "carrying a tin of oil and a small notebook. For thirty years he had "
        "written down the colour of the sky, the direction of the wind, and the "
        "names of the ships that passed the rocks below. Nobody had ever asked "
        "to read the notebooks, which filled three shelves in the kitchen, but "
        "he kept them dusted and in order. One stormy night in November, a young "
        "woman knocked on his door and asked whether he remembered a ship called")

# prompt id -> (kind, text); "chat" prompts are one user turn rendered by the
# model's own chat template with add_generation_prompt (SmolLM2's inserts a
# default system message).
PROMPTS = {
    "france": ("chat", "What is the capital of France?"),
    "fox": ("text", "The quick brown fox"),
    "long": ("text", LONG),  # ~100 tokens: prefill spans several chunks
    "germany": ("text", "Question: What is the capital of Germany?\nAnswer:"),
    # Past the 8192 positions of Llama 3.1's original context, where its
    # rope factors matter most: the paragraph 32 times (~8400 tokens).
    "past8k": ("text", " ".join([LONG] * 32)),
}
# Steps for a prompt, when not N_STEPS (long prompts: a few steps suffice).
STEPS = {"past8k": 4}
# Context for a prompt, when not 512.
CTX = {"past8k": 8704}
# model id (as scripts/fetch-models names it) -> prompt ids
CASES = {
    "smollm2-135m": ["france", "fox", "long"],
    "qwen2.5-coder-0.5b": ["france", "fox"],
    "gemma3-270m": ["germany", "fox", "long"],  # a base model: no chat template
    # The same weights dequantized to F32 (tests/models/dequantize_model.py):
    # no activation rounding, so engines agree to ~1e-5 here.
    "smollm2-135m-f32": ["france", "fox", "long"],
    "gemma3-270m-f32": ["germany", "fox", "long"],
    # Random-weight models of each further architecture
    # (tests/models/make_random_models.py); "long" is longer than gemma3's
    # 8-token sliding window.
    "random-qwen3": ["fox", "long"],
    "random-gemma3": ["fox", "long"],
    "random-qwen3moe": ["fox", "long"],
    "random-mixtral": ["fox", "long"],
    "random-llama3": ["fox", "long", "past8k"],
    "random-qwen35": ["fox", "long"],
    "random-qwen35moe": ["fox", "long"],
    "random-qwen3-yarn": ["fox", "long"],
    "random-gpt-oss": ["fox", "long"],
    "random-gpt-oss-mxfp4": ["fox", "long"],
    "random-deepseek2": ["fox", "long"],
    "random-qwen3next": ["fox", "long"],
    "random-glm4moe": ["fox", "long"],
    "random-minimax-m2": ["fox", "long"],
    "random-gemma4": ["fox", "long"],
    "random-gemma4moe": ["fox", "long"],
    "random-gemma4e": ["fox", "long"],
}


def model_path(name):
    # Reuse the fetch (or random model) script: it verifies the sha256 and prints the path.
    if name.startswith("random-"):
        script = ROOT / "tests" / "models" / "make_random_models.py"
    elif name.endswith("-f32"):
        script, name = ROOT / "tests" / "models" / "dequantize_model.py", name[:-len("-f32")]
    else:
        script = ROOT / "scripts" / "fetch-models"
    out = subprocess.run([str(script), name],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


def load(path, n_threads=2, n_batch=512, kv_type=llama_cpp.GGML_TYPE_F32, n_ctx=512):
    return llama_cpp.Llama(
        model_path=path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
        n_threads=n_threads, n_threads_batch=n_threads,
        logits_all=True,            # keep every position's logits (llm.scores)
        type_k=kv_type, type_v=kv_type,  # f32 KV cache unless measuring noise
        flash_attn=False, n_gpu_layers=0, seed=0, verbose=False)


def render(llm, kind, text):
    if kind == "text":
        return text
    # Same Jinja settings as Hugging Face's apply_chat_template.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(llm.metadata["tokenizer.chat_template"])
    return tmpl.render(messages=[{"role": "user", "content": text}], add_generation_prompt=True)


def piece(llm, tok):
    buf = (llama_cpp.ctypes.c_char * 256)()
    n = llama_cpp.llama_token_to_piece(llm._model.vocab, tok, buf, len(buf), 0, True)
    return bytes(buf[:n])


def run(llm, prompt_tokens, forced=None, n_steps=N_STEPS):
    """Greedy (or teacher-forced along `forced`); returns [(token, logits)]."""
    llm.reset()
    llm.eval(prompt_tokens)
    steps = []
    for i in range(len(forced) if forced else n_steps):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        tok = forced[i] if forced else int(np.argmax(logits))  # argmax: lowest id on ties
        steps.append((tok, logits))
        if forced is None and llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok):
            break
        if i + 1 < (len(forced) if forced else n_steps):
            llm.eval([tok])
    return steps


def top(logits):
    order = np.argsort(-logits, kind="stable")[:N_TOP]  # stable: ties by lower id
    return [[int(i), round(float(logits[i]), 6)] for i in order]


def make(llm, path, pid):
    kind, text = PROMPTS[pid]
    prompt = render(llm, kind, text)
    # add_bos=True adds BOS only if the GGUF's tokenizer.ggml.add_bos_token says so;
    # special=True parses <|im_start|> etc. as special tokens.
    toks = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    steps = run(llm, toks, n_steps=STEPS.get(pid, N_STEPS))
    pieces = [piece(llm, t) for t, _ in steps]
    return {
        "model": Path(path).name,
        "prompt": prompt,
        "prompt_tokens": toks,
        "steps": [{"token": t, "piece": p.decode("utf-8", "replace"), "top": top(l)}
                  for (t, l), p in zip(steps, pieces)],
        "text": b"".join(pieces).decode("utf-8", "replace"),
        "reference": REFERENCE,
    }


def noise(name, path, pid, gold):
    """Max |logit diff| vs the 2-thread run, along the golden path, for variants."""
    toks, forced = gold["prompt_tokens"], [s["token"] for s in gold["steps"]]
    ctx = CTX.get(pid, 512)
    base = run(load(path, n_ctx=ctx), toks, forced)
    for label, kw in [("1 thread", dict(n_threads=1)), ("n_batch 16", dict(n_batch=16)),
                      ("f16 KV", dict(kv_type=llama_cpp.GGML_TYPE_F16))]:
        other = run(load(path, n_ctx=ctx, **kw), toks, forced)
        d_top = max(abs(float(b[1][i]) - float(o[1][i]))
                    for b, o, s in zip(base, other, gold["steps"]) for i, _ in s["top"])
        d_all = max(float(np.max(np.abs(b[1] - o[1]))) for b, o in zip(base, other))
        flips = sum(int(np.argmax(b[1]) != np.argmax(o[1])) for b, o in zip(base, other))
        print(f"{name}.{pid}: {label}: max|d| top10 {d_top:.2e}, all vocab {d_all:.2e}, "
              f"argmax flips {flips}/{len(base)}")


def main():
    args = sys.argv[1:]
    do_noise = "--noise" in args
    names = [a for a in args if not a.startswith("--")] or list(CASES)
    for name in names:
        path = model_path(name)
        llm = load(path)
        for pid in CASES[name]:
            gold = make(load(path, n_ctx=CTX[pid]) if pid in CTX else llm, path, pid)
            if do_noise:
                noise(name, path, pid, gold)
                continue
            out = OUT / f"{name}.{pid}.json"
            out.write_text(json.dumps(gold) + "\n")
            print(f"{out.relative_to(ROOT)}: {len(gold['prompt_tokens'])} prompt tokens, "
                  f"{len(gold['steps'])} steps: {gold['text']!r}")


if __name__ == "__main__":
    main()
