#!/usr/bin/env python3
"""Concurrent streams: `shoal serve --parallel N` beside `llama-server -np N`.

    bench/parallel_bench.py -m MODEL [--np 4] [-n 128] [-t THREADS] [-r 3]

For each server, on loopback: one greedy completion stream alone, then N at
once (same prompt, `ignore_eos`, n tokens each), alternating the two
servers' repeats. Prints generated tokens per second, the aggregate of the N
streams over the wall time they took together, and their ratio to one
stream. Builds nothing: SHOAL (default build/shoal), LLAMA_SERVER (default
~/.cache/shoal/llama.cpp-build/bin/llama-server). Both servers are stopped
on exit.
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from local_server import post, wait_ready

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Once upon a time, in a small village by the sea, there lived"


def streams(port, count, n_tokens):
    """Tokens per second of `count` concurrent greedy completions (aggregate)."""
    done = []

    def one():
        r = post(port, "/v1/completions", {"prompt": PROMPT, "max_tokens": n_tokens, "temperature": 0, "ignore_eos": True})
        done.append(r["usage"]["completion_tokens"])

    threads = [threading.Thread(target=one) for _ in range(count)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if len(done) != count or any(n != n_tokens for n in done):
        sys.exit(f"error: expected {count} x {n_tokens} tokens, got {done}")
    return sum(done) / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("-n", type=int, default=128, help="tokens per stream")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-r", "--reps", type=int, default=3)
    args = ap.parse_args()
    shoal = os.environ.get("SHOAL", str(ROOT / "build" / "shoal"))
    llama = os.environ.get("LLAMA_SERVER", str(Path.home() / ".cache/shoal/llama.cpp-build/bin/llama-server"))
    ctx = 512  # per stream
    servers = {
        "shoal": [shoal, "serve", "-m", args.model, "-t", str(args.threads), "--parallel", str(args.np), "-c", str(ctx),
                  "--port", "18181"],
        # llama-server's -c is shared by its slots.
        "llama.cpp": [llama, "-m", args.model, "-t", str(args.threads), "-np", str(args.np), "-c", str(ctx * args.np),
                      "--port", "18182", "--no-webui"],
    }
    ports = {"shoal": 18181, "llama.cpp": 18182}
    procs = {}
    results = {name: {"1": [], "N": []} for name in servers}
    try:
        for name, cmd in servers.items():
            procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_ready(ports[name], procs[name])
            streams(ports[name], 1, 8)  # warm-up
        for _ in range(args.reps):
            for name in servers:
                results[name]["1"].append(streams(ports[name], 1, args.n))
                results[name]["N"].append(streams(ports[name], args.np, args.n))
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    def fmt(v):
        return f"{statistics.mean(v):.1f} ± {statistics.stdev(v) if len(v) > 1 else 0:.1f}"

    print(f"Model {Path(args.model).name}, {args.threads} threads, {args.n} tokens per stream, "
          f"{args.reps} alternated repeats; load average before: see the caller")
    print()
    # Each repeat runs its single stream and its N streams back to back, so
    # the ratio within a repeat sees the same machine; on a noisy host their
    # median is steadier than the ratio of the means.
    print(f"| server | 1 stream t/s | {args.np} streams, aggregate t/s | {args.np} streams / 1 stream (means) "
          f"| median of the repeats' ratios |")
    print("| ------ | -----------: | ----------------------: | -----------------: | ----------: |")
    for name in servers:
        one, many = results[name]["1"], results[name]["N"]
        paired = statistics.median(m / o for m, o in zip(many, one))
        print(f"| {name} | {fmt(one)} | {fmt(many)} | {statistics.mean(many) / statistics.mean(one):.2f} | {paired:.2f} |")
    print()
    for name, cmd in servers.items():
        print("    " + " ".join(str(c).replace(str(ROOT) + "/", "").replace(str(Path.home()), "~") for c in cmd))


if __name__ == "__main__":
    main()
