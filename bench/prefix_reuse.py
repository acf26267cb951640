#!/usr/bin/env python3
"""What prefix reuse saves: `shoal serve` on one model, a long prompt, then
a prompt that extends it (the next turn of a chat: the slot's cache is
reused) against one of the same length that diverges a little before the
end (a model with a recurrent state, qwen35, computes that one again from
position 0; an attention-only model reuses up to the divergence). Prints
the time to one generated token for each, three rounds.

    bench/prefix_reuse.py MODEL [-t THREADS] [--repeat N]

Loopback only; the server is stopped at the end."""
import argparse
import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PORT = 18099


def post(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    start = time.monotonic()
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=600).read()
    return time.monotonic() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20, help="sentences in the first prompt")
    args = ap.parse_args()
    cmd = [str(ROOT / "build" / "shoal"), "serve", "-m", args.model, "--port", str(PORT), "-t", str(args.threads),
           "-c", "4096"]
    print("server:", " ".join(cmd))
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        base = " ".join(["The lighthouse keeper climbed the spiral stairs every evening at dusk."] * args.repeat)
        tail = " and then the keeper wrote one more line."
        for i in range(3):
            post(f"{base} turn {i}")                 # fills the slot
            extends = post(f"{base} turn {i}{tail}")
            post(f"{base} turn {i}")
            diverges = post(f"{base} Turn {i}{tail}")  # differs 40-odd characters before the end
            print(f"round {i}: extends the slot {extends * 1000:.0f} ms, diverges near its end {diverges * 1000:.0f} ms")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
