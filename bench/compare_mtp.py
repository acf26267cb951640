#!/usr/bin/env python3
"""The model's own MTP block as the draft, beside llama.cpp's draft-mtp: the
same file, prompt, threads, tokens and guess length.

    bench/compare_mtp.py [-m GGUF] [-t THREADS] [-n TOKENS] [--draft-max N] [-r REPS]

Shoal: `shoal bench --spec-type mtp -f PROMPT` (greedy generation from the
prompt, plain and guessing, alternated; the same tokens checked). llama.cpp:
`llama-speculative-simple --spec-type draft-mtp` (its "decoded ... speed"
and n_drafted / n_accept) and `llama-bench -p 0 -n TOKENS` for its plain
decode. On random weights the guesses are almost never right: the rows show
what a guess costs, not what it gains (docs/benchmarks.md says how to
predict the gain with `shoal plan --draft-accept`). Prints a markdown table,
the machine and every command.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("SHOAL_MODELS_DIR") or Path.home() / ".cache/shoal/models")
LLAMA_BIN = Path(os.environ.get("LLAMA_BIN", Path.home() / ".cache/shoal/llama.cpp-build/bin"))
PROMPT = "Once upon a time, a cat and a dog lived in a small house by the river."
commands = []


def run(argv):
    commands.append(" ".join(shlex.quote(str(a)) for a in argv))
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, errors="replace")
    if r.returncode != 0:
        sys.exit(f"error: {commands[-1]} failed:\n{r.stderr[-2000:]}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", default=str(MODELS / "random" / "bench-qwen35-mtp.gguf"))
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("-r", type=int, default=2)
    args = ap.parse_args()
    shoal = ROOT / "build" / "shoal"
    spec_simple, llama_bench = LLAMA_BIN / "llama-speculative-simple", LLAMA_BIN / "llama-bench"
    for f in (shoal, Path(args.m), spec_simple, llama_bench):
        if not f.exists():
            sys.exit(f"error: not found: {f} (docs/benchmarks.md says how to build llama.cpp's tools)")
    prompt = Path(tempfile.mkdtemp()) / "prompt.txt"
    prompt.write_text(PROMPT)

    out = json.loads(run([shoal, "bench", "-m", args.m, "-t", args.t, "-p", 0, "-n", args.n, "-r", args.r,
                          "--spec-type", "mtp", "--draft-max", args.draft_max, "-f", prompt, "-o", "json"]).stdout)
    plain = next(r for r in out if r.get("spec_type") == "none")
    mtp = next(r for r in out if r.get("spec_type") == "mtp")

    rates, drafted, accepted = [], 0, 0
    for _ in range(args.r):
        r = run([spec_simple, "-m", args.m, "--spec-type", "draft-mtp", "--spec-draft-n-max", args.draft_max,
                 "-f", prompt, "-n", args.n, "--temp", 0, "-t", args.t, "-c", 2048])
        log = r.stdout + r.stderr
        rates.append(float(re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", log)[1]))
        drafted += int(re.search(r"n_drafted\s*=\s*(\d+)", log)[1])
        accepted += int(re.search(r"n_accept\s*=\s*(\d+)", log)[1])
    lb = json.loads(run([llama_bench, "-m", args.m, "-t", args.t, "-p", 0, "-n", args.n, "-r", args.r,
                         "-o", "json"]).stdout)
    llama_plain = lb[0]["avg_ts"]

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"Machine: {cpu}, {os.cpu_count()} CPUs; -t {args.t}; shoal at {head.stdout.strip()}; {Path(args.m).name}; "
          f"greedy, {args.n} tokens, guesses of at most {args.draft_max}, {args.r} runs each\n")
    print("| tool | plain t/s | MTP t/s | MTP / plain | guessed tokens right | accepted per step |")
    print("| ---- | --------: | ------: | ----------: | -------------------: | ----------------: |")

    def row(tool, p, s, d, a, tokens):
        steps = max(1, tokens - a)
        print(f"| {tool} | {p:.2f} | {s:.2f} | {s / p:.2f} | {a} of {d} ({100 * a / max(1, d):.1f} %) | "
              f"{a / steps:.2f} |")

    row("shoal", plain["avg_ts"], mtp["avg_ts"], mtp["drafted"], mtp["accepted"], mtp["n_gen"] * args.r)
    row("llama.cpp", llama_plain, statistics.mean(rates), drafted, accepted, args.n * args.r)
    print(f"\nShoal's MTP decode / llama.cpp's draft-mtp decode: {mtp['avg_ts'] / statistics.mean(rates):.2f}x")
    print("\nCommands:\n")
    for c in commands:
        print("    " + c)


if __name__ == "__main__":
    main()
