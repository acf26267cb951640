#!/usr/bin/env python3
"""Prompts on one machine, tokens on another (`--prefill-on`) against one placement for both.

    sudo bench/prompt_placement_bench.py [-m MODEL] [-p 2048] [-n 64] [-r 3]

Hosts are network namespaces on a private bridge (tests/tools/netns.py): the
primary in host 0 (-t 1, no layers: --ts 0,0,1), worker A in host 1 with 2
threads (the machine that computes faster: the only asymmetry a 2-core box
can make) and worker B in host 2 with 1 thread, over veth with sealed links.
"joint": B holds every layer and runs the prompt and the tokens; "split":
the same plan, with the prompt on A (--prefill-on) and its cache moved to B.
Prints, per setting, the time to first token (shoal run's prompt time), the
decode rate, the cache moved and how long the move took, each the median of
-r runs, and whether the texts agree. Needs root; builds nothing; removes
every process and namespace on exit."""
import argparse
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "tools"))
from netns import Netns  # noqa: E402

SHOAL = ROOT / "build" / "shoal"
MODEL = Path.home() / ".cache/shoal/models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
PORT = 50052
WORDS = ("the harbour nets morning children quay boats tide names shouting old town fishermen mended each "
         "along ran came in with as they of and").split()


def prompt_of(n_words):
    return " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(n_words))


def wait_listening(log, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "worker listening" in log.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise RuntimeError(f"worker did not start: {log.read_text(errors='replace')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=str(MODEL))
    ap.add_argument("-p", type=int, default=2048, help="prompt tokens (about)")
    ap.add_argument("-n", type=int, default=64, help="tokens generated")
    ap.add_argument("-r", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="shoal-prompt-bench-"))
    key = tmp / "cluster.key"
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    # Words of this list are about one token each for the bench's models; the printed count is the real one.
    prompt = prompt_of(args.p)
    with Netns(n_hosts=3) as net:
        procs = []
        try:
            for host, threads in ((1, 2), (2, 1)):
                log = tmp / f"worker{host}.log"
                procs.append(net.popen(host, [str(SHOAL), "worker", "--host", net.addr(host), "--port", str(PORT),
                                              "-t", str(threads), "--no-cache", "--key-file", str(key)],
                                       stdout=log.open("w"), stderr=subprocess.STDOUT))
                wait_listening(log)
            a, b = f"{net.addr(1)}:{PORT}", f"{net.addr(2)}:{PORT}"
            base = [str(SHOAL), "run", "-m", args.model, "-p", prompt, "-n", str(args.n), "--temp", "0",
                    "--ignore-eos", "--no-echo", "-t", "1", "-c", str(args.p + args.n + 256), "-b", "512",
                    "--rpc", f"{a},{b}", "--ts", "0,0,1", "--key-file", str(key)]
            rows = {}
            for name, extra in (("joint", []), ("split", ["--prefill-on", a])):
                runs = []
                for _ in range(args.r):
                    r = net.run(0, base + extra, timeout=600)
                    if r.returncode != 0:
                        raise RuntimeError(f"{name}: exit {r.returncode}\n{r.stderr[-3000:]}")
                    m = re.search(r"prompt: (\d+) tokens in ([\d.]+) s .*generation: (\d+) tokens in ([\d.]+) s",
                                  r.stderr)
                    moved = re.search(r"cache moved to the decode stages \(([\d.]+) MiB in ([\d.]+) s\)", r.stderr)
                    runs.append({"n_prompt": int(m.group(1)), "ttft": float(m.group(2)),
                                 "tg": int(m.group(3)) / float(m.group(4)),
                                 "mib": float(moved.group(1)) if moved else 0.0,
                                 "move_s": float(moved.group(2)) if moved else 0.0, "text": r.stdout})
                rows[name] = runs
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=10)
    model = Path(args.model).name
    n_prompt = rows["joint"][0]["n_prompt"]
    print(f"\n{model}: a prompt of {n_prompt} tokens, {args.n} generated; worker A -t 2, worker B -t 1 (B holds "
          f"every layer), over veth with sealed links; medians of {args.r} runs\n")
    print("| placement | time to first token | prompt tok/s | decode tok/s | cache moved | move time |")
    print("|---|---|---|---|---|---|")
    for name, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("ttft", "tg", "mib", "move_s")}
        where = "prompt and tokens on B" if name == "joint" else "prompt on A, tokens on B"
        moved = f"{med['mib']:.1f} MiB" if med["mib"] else "-"
        took = f"{med['move_s']:.3f} s" if med["mib"] else "-"
        print(f"| {where} | {med['ttft']:.2f} s | {n_prompt / med['ttft']:.1f} | {med['tg']:.1f} | {moved} | {took} |")
    same = all(r["text"] == rows["joint"][0]["text"] for runs in rows.values() for r in runs)
    joint, split = (statistics.median(r["ttft"] for r in rows[k]) for k in ("joint", "split"))
    print(f"\ntime to first token: {joint / split:.2f}x with the prompt on A; texts {'the same' if same else 'DIFFER'}")
    print(f"command: sudo bench/prompt_placement_bench.py -m {args.model.replace(str(Path.home()), '~')} -p {args.p} "
          f"-n {args.n} -r {args.r}")


if __name__ == "__main__":
    main()
