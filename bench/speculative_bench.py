#!/usr/bin/env python3
"""Speculative decoding on one machine: `shoal serve` beside llama.cpp's
`llama-server`, the same files, prompts and threads.

    bench/speculative_bench.py [--target F16.gguf] [--draft Q4_K_M.gguf] [--ngram-model GGUF]
                               [-n 128] [-r 3] [-t 2] [--llama-server PATH]

Each server runs once per setting (plain, a draft model, n-gram lookup) and
answers every prompt of bench/prompts as a chat turn, greedy, -n tokens at
most, r times; the generation speed is the server's own `timings`
(predicted_per_second: the prompt excluded) and the guesses its draft_n and
draft_n_accepted, which both servers report. Shoal's speculative text must
equal its plain text (checked); llama.cpp's is compared and reported.
Servers are started one at a time on loopback ports and stopped after their
setting; prints a markdown table and every command it ran.
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from local_server import post, wait_ready

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("SHOAL_MODELS_DIR") or Path.home() / ".cache/shoal/models")
LLAMA_SERVER = Path.home() / ".cache/shoal/llama.cpp-build/bin/llama-server"
PROMPTS = sorted((ROOT / "bench" / "prompts").glob("*.txt"))
commands = []


def start(argv, port, log):
    commands.append(" ".join(shlex.quote(str(a)) for a in argv))
    p = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT)
    wait_ready(port, p, 300)
    return p


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def measure(argv, port, prompts, args, log):
    """{prompt: (texts, [tok/s], drafted, accepted)} for one server setting."""
    p = start(argv, port, log)
    try:
        out = {}
        for prompt in prompts:
            text = prompt.read_text()
            body = {"messages": [{"role": "user", "content": text}], "max_tokens": args.n, "temperature": 0,
                    "seed": 1}
            post(port, "/v1/chat/completions", {**body, "max_tokens": 4})  # warm-up: the weights paged in
            texts, rates, drafted, accepted = [], [], 0, 0
            for _ in range(args.r):
                r = post(port, "/v1/chat/completions", body)
                t = r["timings"]
                texts.append(r["choices"][0]["message"]["content"])
                rates.append(t["predicted_per_second"])
                drafted += t.get("draft_n", 0)
                accepted += t.get("draft_n_accepted", 0)
                tokens = t["predicted_n"]
            out[prompt.name] = (texts, rates, drafted, accepted, tokens)
        return out
    finally:
        stop(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=str(MODELS / "Qwen2.5-Coder-0.5B-Instruct.F16.gguf"))
    ap.add_argument("--draft", default=str(MODELS / "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"))
    ap.add_argument("--ngram-model", default=str(MODELS / "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"),
                    help="the model n-gram lookup is measured on")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--llama-server", default=str(LLAMA_SERVER))
    ap.add_argument("--no-llama", action="store_true")
    args = ap.parse_args()
    shoal = ROOT / "build" / "shoal"
    for f in (shoal, Path(args.target), Path(args.draft), Path(args.ngram_model)):
        if not f.exists():
            sys.exit(f"error: not found: {f}")
    llama = None if args.no_llama or not Path(args.llama_server).exists() else Path(args.llama_server)

    # (label, model, shoal flags, llama-server flags)
    settings = [
        ("plain", args.target, [], []),
        ("draft", args.target, ["-md", args.draft], ["-md", args.draft, "--spec-type", "draft-simple",
                                                     "--spec-draft-n-max", 16]),
        ("plain", args.ngram_model, [], []),
        ("ngram", args.ngram_model, ["--spec-type", "ngram"], ["--spec-type", "ngram-simple"]),
    ]
    results = {}  # (tool, label, model) -> measure()
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / "speculative_bench.log", "w")
    for label, model, shoal_flags, llama_flags in settings:
        print(f"{label} on {Path(model).name} ...", file=sys.stderr)
        results[("shoal", label, model)] = measure(
            [shoal, "serve", "-m", model, "--port", 18431, "-t", args.t, "-c", 4096, *shoal_flags], 18431,
            PROMPTS, args, log)
        if llama:
            results[("llama.cpp", label, model)] = measure(
                [llama, "-m", model, "--port", 18432, "-t", args.t, "-c", 4096, "-np", 1, *llama_flags], 18432,
                PROMPTS, args, log)

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"Machine: {cpu}, {os.cpu_count()} CPUs; -t {args.t}; shoal at {head.stdout.strip()}; "
          f"greedy, at most {args.n} tokens, {args.r} runs each; tokens/s: the servers' predicted_per_second, mean\n")
    print("| model | prompt | guesses | tool | plain t/s | speculative t/s | speed-up | guessed tokens right | same text as plain |")
    print("| ----- | ------ | ------- | ---- | --------: | --------------: | -------: | -------------------: | ------------------ |")
    failed = False
    for label, model, _, _ in settings:
        if label == "plain":
            continue
        for tool in ("shoal", "llama.cpp"):
            if (tool, label, model) not in results:
                continue
            spec, plain = results[(tool, label, model)], results[(tool, "plain", model)]
            for prompt in PROMPTS:
                s_texts, s_rates, drafted, accepted, tokens = spec[prompt.name]
                p_texts, p_rates, *_ = plain[prompt.name]
                same = all(t == p_texts[0] for t in s_texts + p_texts)
                if tool == "shoal" and not same:
                    failed = True
                sm, pm = statistics.mean(s_rates), statistics.mean(p_rates)
                right = f"{accepted} of {drafted} ({100 * accepted / max(1, drafted):.0f} %)"
                print(f"| {Path(model).name} | {prompt.name} ({tokens} tokens) | {label} | {tool} | {pm:.2f} | "
                      f"{sm:.2f} | {sm / pm:.2f} | {right} | {'yes' if same else 'no'} |")
    print("\nCommands:\n")
    for c in commands:
        print("    " + c)
    if failed:
        sys.exit("error: Shoal's speculative text differs from its plain text")


if __name__ == "__main__":
    main()
