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

    bench/constrained_output.py MODEL [-t THREADS] [--rounds N] [--max-tokens N]

Loopback only; the server is stopped at the end."""
import argparse
import json
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=160)
    args = ap.parse_args()

    import openai
    proc = subprocess.Popen([str(ROOT / "build" / "shoal"), "serve", "-m", args.model, "--port", "0",
                             "-t", str(args.threads)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(proc.stdout.readline().rsplit(":", 1)[1])
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        for _ in range(300):
            try:
                client.models.list()
                break
            except (openai.APIConnectionError, openai.InternalServerError):
                time.sleep(0.1)
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
        for r in range(args.rounds):
            for s, sampling in samplings.items():
                for k, kw in kinds.items():
                    per, n = decode_seconds_per_token(client, args.max_tokens, seed=r, **sampling, **kw)
                    if per is not None:
                        times[(k, s)].append(per)
                        counts[(k, s)].append(n)
        print(f"| sampling | output | tokens (median) | decode ms/token (median of {args.rounds}) | vs free |")
        print("|---|---|---:|---:|---:|")
        for s in samplings:
            free = statistics.median(times[("free", s)])
            for k in kinds:
                if not times[(k, s)]:
                    print(f"| {s} | {k} | – | – | – |")
                    continue
                med = statistics.median(times[(k, s)])
                print(f"| {s} | {k} | {statistics.median(counts[(k, s)]):.0f} | {med * 1000:.2f} | "
                      f"{med / free:.3f} |")
        print(f"\ncommand: bench/constrained_output.py {args.model} -t {args.threads} --rounds {args.rounds} "
              f"--max-tokens {args.max_tokens}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
