#!/usr/bin/env python3
"""What constrained output costs per generated token: `shoal serve` on one
model, the same chat prompt decoded free, as json_object, held to a nested
JSON schema; greedy and sampled (temperature 0.9,
where the model's first pick is refused more often and the whole-vocabulary
mask is built). Requests of each kind alternate, so drift in a shared
machine's speed spreads over all of them. Prints a markdown table of the
median decode time per token (from the first streamed token to the last)
and its ratio to the free decode of the same sampling. (A forced tool call
is held by the same grammar machinery, but its stream holds the text until
the call is whole, so it has no per-token times to show here.)

    bench/constrained_output.py MODEL [-t THREADS] [--rounds N] [--max-tokens N] [--llama-server PATH]

With --llama-server (llama.cpp's server, built outside the repository), the
same requests go to it too (-c 4096 -np 1 --jinja, as Shoal's one slot of
4096), after Shoal's: each server's ratios are to its own free decode.
Loopback only; the servers are stopped at the end."""
import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from test_constrained_output import SCHEMAS  # noqa: E402  the schemas the tests validate

PROMPT = "Make up a shop order and describe it in detail."


def decode_seconds_per_token(client, n_max, **kw):
    start = None
    last = None
    tokens = 0
    stream = client.chat.completions.create(model="default", messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=n_max, stream=True, stream_options={"include_usage": True},
                                            **kw)
    for chunk in stream:
        now = time.monotonic()
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
        elif chunk.choices and chunk.choices[0].delta.content:
            if start is None:
                start = now
            last = now
    if tokens < 3 or start is None or last == start:
        return None, tokens
    return (last - start) / (tokens - 1), tokens


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(which, model, threads, llama_server):
    import openai
    if which == "shoal":
        proc = subprocess.Popen([str(ROOT / "build" / "shoal"), "serve", "-m", model, "--port", "0", "-t", str(threads)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        port = int(proc.stdout.readline().rsplit(":", 1)[1])
    else:
        port = free_port()
        proc = subprocess.Popen([llama_server, "-m", model, "--port", str(port), "-t", str(threads), "-c", "4096",
                                 "-np", "1", "--jinja"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    for _ in range(600):
        try:
            client.models.list()
            return proc, client
        except (openai.APIConnectionError, openai.InternalServerError, openai.APIStatusError):
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"{which} did not start")


def measure(client, rounds, max_tokens):
    order = {"type": "json_schema", "json_schema": {"name": "order", "schema": SCHEMAS["order"], "strict": True}}
    kinds = {
        "free": {"extra_body": {"ignore_eos": True}},
        "json_object": {"response_format": {"type": "json_object"}},
        "json_schema (nested, $ref)": {"response_format": order},
    }
    samplings = {"greedy": {"temperature": 0}, "sampled (T 0.9)": {"temperature": 0.9}}
    times = {(k, s): [] for k in kinds for s in samplings}
    counts = {(k, s): [] for k in kinds for s in samplings}
    decode_seconds_per_token(client, 8, temperature=0)  # warm up
    for r in range(rounds):
        for s, sampling in samplings.items():
            for k, kw in kinds.items():
                per, n = decode_seconds_per_token(client, max_tokens, seed=r, **sampling, **kw)
                if per is not None:
                    times[(k, s)].append(per)
                    counts[(k, s)].append(n)
    rows = []
    for s in samplings:
        free = statistics.median(times[("free", s)])
        for k in kinds:
            if times[(k, s)]:
                med = statistics.median(times[(k, s)])
                rows.append((s, k, statistics.median(counts[(k, s)]), med, med / free))
            else:
                rows.append((s, k, None, None, None))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary, to measure beside")
    args = ap.parse_args()
    servers = ["shoal"] + (["llama.cpp"] if args.llama_server else [])
    results = {}
    for which in servers:
        proc, client = start(which, args.model, args.threads, args.llama_server)
        try:
            results[which] = measure(client, args.rounds, args.max_tokens)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"| server | sampling | output | tokens (median) | decode ms/token (median of {args.rounds}) | vs free |")
    print("|---|---|---|---:|---:|---:|")
    for which in servers:
        for s, k, n, med, ratio in results[which]:
            if med is None:
                print(f"| {which} | {s} | {k} | – | – | – |")
            else:
                print(f"| {which} | {s} | {k} | {n:.0f} | {med * 1000:.2f} | {ratio:.3f} |")
    extra = f" --llama-server {args.llama_server}" if args.llama_server else ""
    print(f"\ncommand: bench/constrained_output.py {args.model} -t {args.threads} --rounds {args.rounds} "
          f"--max-tokens {args.max_tokens}{extra}")


if __name__ == "__main__":
    main()
