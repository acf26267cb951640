#!/usr/bin/env python3
"""Across machines: `shoal bench --rpc` vs llama.cpp's `llama-bench --rpc`.

    sudo bench/cluster_bench.py [-m MODEL] [-p 128] [-n 64] [-r 3] [--parts local,veth,delay,aead,speed,prefill,spec,tensor]
                                [--speed-model MODEL] [--time-limit MINUTES] [--no-idle-wait]

Hosts are network namespaces on a private bridge (tests/tools/netns.py): the
primary in host 0, workers (`shoal worker` / `ggml-rpc-server`) in hosts 1..3,
every process -t 1. Parts: "local" (no workers, in host 0), "veth" (1-3
workers straight over the veth links; Shoal star and chain) and "delay" (one
worker behind build/shoal_delay_relay, run in host 0, at 0.1, 1 and 5 ms round
trip); "aead" (Shoal only: 1 and 3 workers over veth with the sealed link,
the default with a key, against --insecure plain frames, alternated); "speed" (Shoal only: a fast
worker and a slow one, whose CPU a real-time neighbour takes 3/4 of (tests/tools/cpu_share.py),
split by memory against split by speed, alternated, with each stage's predicted and measured
decode step; --speed-model, whose stages outgrow the caches as a real model's do); "prefill" (pp512 and pp2048 on 2 and 3 workers:
Shoal's prompts pipelined in micro-batches, -ub 64, against whole batches, -ub 0, beside
llama.cpp RPC); "spec" (Shoal only: speculative decoding, a draft model and n-gram lookup, locally and on 2
workers over veth and behind relays at 1 and 5 ms round trip; --spec-target, --spec-draft); "tensor" (Shoal only:
-m and --speed-model on one machine alone (Shoal and llama-bench), on 2 workers splitting the layers (--ts 0,1,1:
the primary keeps the head only) and on 2 workers as a
tensor group (-sm tensor), pp512 and tg of -n, over veth; with each run's predictions and what -sm auto takes). llama.cpp gets the same layer split as Shoal's plan: -ngl counts the
output head as a 31st layer, so it offloads one more layer than the workers
hold and -ot keeps the (tied) output head on the primary, as Shoal does.

Each measurement waits until the CPUs are idle and is repeated (at most twice
more) if another process used over 10 % of a CPU while it ran. Prints markdown
tables, then every command it ran (paths relative to the repository root).
Needs root; builds nothing (build/shoal and the relay are copied at start, so a
rebuild meanwhile changes nothing). Bounded: a bench run may take 5 minutes, an idle
wait 10, and no setting starts after --time-limit minutes. Every process
and namespace is removed on exit, Ctrl-C included.
"""
import argparse
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "tools"))
from cpu_share import CpuShare  # noqa: E402
from netns import Netns  # noqa: E402

SHOAL = ROOT / "build" / "shoal"
RELAY = ROOT / "build" / "shoal_delay_relay"
LLAMA = Path.home() / ".cache/shoal/llama.cpp-build/bin"
MODEL = Path.home() / ".cache/shoal/models/SmolLM2-135M-Instruct.Q4_1.gguf"
SPEED_MODEL = Path.home() / ".cache/shoal/models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
# The "spec" part: the F16 target (tests/models/dequantize_model.py qwen2.5-coder-0.5b-f16) and its
# Q4_K_M as the draft; the prompt a code edit (bench/prompts).
SPEC_TARGET = Path.home() / ".cache/shoal/models/Qwen2.5-Coder-0.5B-Instruct.F16.gguf"
SPEC_PROMPT = ROOT / "bench" / "prompts" / "code_edit.txt"
NEIGHBOUR_BUSY = 0.75  # of the slow worker's CPU, taken by its neighbour in the "speed" part
PORT, RELAY_PORT = 50052, 50100
DELAYS_MS = [0.05, 0.5, 2.5]  # one way
BENCH_TIMEOUT_S, IDLE_TIMEOUT_S = 300, 600

commands = []  # "[host i] command", in the order run
snapshots = {}  # copy -> original: binaries are copied at start, so a rebuild meanwhile changes nothing


def show(host, argv):
    short = (snapshots.get(str(a), str(a)).replace(f"{ROOT}/", "").replace(str(Path.home()), "~")
             for a in argv)
    return f"[host {host}] " + " ".join(a if a.startswith("~") else shlex.quote(a) for a in short)


def cpu_ticks():
    """(busy, total) jiffies over all CPUs."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v)


def wait_idle(busy_max=0.08, seconds=6):
    """Until all CPUs are under busy_max for `seconds` in a row; False on timeout."""
    end, calm = time.time() + IDLE_TIMEOUT_S, 0
    while time.time() < end:
        b0, t0 = cpu_ticks()
        time.sleep(1)
        b1, t1 = cpu_ticks()
        calm = calm + 1 if (b1 - b0) <= busy_max * max(t1 - t0, 1) else 0
        if calm >= seconds:
            return True
    return False


def proc_table():
    """{pid: (ppid, name, cpu ticks)} of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                s = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            name, rest = s[s.index("(") + 1:s.rindex(")")], s[s.rindex(")") + 2:].split()
            out[int(d)] = (int(rest[1]), name, int(rest[11]) + int(rest[12]))
    return out


def others_max_cpu(before, after, wall):
    """The busiest process outside this script's tree (and not a kernel thread): (share, name)."""
    ours, grew = {os.getpid()}, True
    while grew:
        new = {p for p, (pp, _, _) in after.items() if pp in ours} - ours
        ours |= new
        grew = bool(new)
    hz, worst = os.sysconf("SC_CLK_TCK"), (0.0, "-")
    for pid, (ppid, name, ticks) in after.items():
        if pid in ours or pid == 2 or ppid == 2 or pid not in before:
            continue
        worst = max(worst, ((ticks - before[pid][2]) / hz / wall, f"{name}[{pid}]"))
    return worst


def wait_listening(log, needle, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if needle in log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"no '{needle}' in {log}:\n{log.read_text(errors='replace')}")


def wait_port(net, host, addr, port, timeout=20):
    probe = f"import socket; socket.create_connection(('{addr}', {port}), 1).close()"
    end = time.time() + timeout
    while time.time() < end:
        if net.run(host, ["python3", "-c", probe]).returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {addr}:{port} in host {host}")


class Bench:
    def __init__(self, net, tmp, args):
        self.net, self.tmp, self.args = net, tmp, args
        self.shoal, self.relay_bin = self.snapshot(SHOAL), self.snapshot(RELAY)
        self.key = tmp / "cluster.key"
        self.key.write_text(secrets.token_hex(32) + "\n")
        self.common = ["-m", args.model, "-t", "1", "-p", args.p, "-n", args.n, "-r", args.r, "-o", "json"]
        self.n_logs, self.procs, self.logs = 0, [], []

    def snapshot(self, binary):
        copy = shutil.copy2(binary, self.tmp / binary.name)
        snapshots[str(copy)] = str(binary)
        return copy

    def start(self, host, argv, ready):
        """Start a server in `host`; ready = ("line", text) or ("port", addr, port)."""
        self.n_logs += 1
        log = self.tmp / f"{self.n_logs:02d}-host{host}-{Path(argv[0]).name}.log"
        commands.append(show(host, argv))
        p = self.net.popen(host, argv, stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.logs.append(log)
        if ready[0] == "line":
            wait_listening(log, ready[1])
        else:
            wait_port(self.net, 0, ready[1], ready[2])
        return p

    def workers(self, tool, n, insecure=False, slow=None):
        """Start n workers in hosts 1..n (with slow = (index, CpuShare): worker
        `index`, 1-based, on the shared CPU, the others off it); their host:port list."""
        eps = []
        for i in range(1, n + 1):
            a = self.net.addr(i)
            if tool == "shoal":
                pin = [] if not slow else slow[1].pin_slow() if slow[0] == i else slow[1].pin_others()
                self.start(i, pin + [self.shoal, "worker", "--host", a, "--port", PORT, "-t", "1", "--no-cache",
                                     "--key-file", self.key] + (["--insecure"] if insecure else []),
                           ("line", "worker listening"))
            else:
                self.start(i, [LLAMA / "ggml-rpc-server", "-H", a, "-p", PORT, "-t", "1"], ("port", a, PORT))
            eps.append(f"{a}:{PORT}")
        return eps

    def relay(self, target, delay_ms, index=0):
        """A relay in host 0 on its bridge address: the primary reaches the worker through it, and so do the
        other members of a tensor group (they link to the addresses the primary names), so every link of the
        worker's is delayed."""
        spin = ["--spin-us", "100"] if delay_ms < 0.1 else []
        listen = f"{self.net.addr(0)}:{RELAY_PORT + index}"
        self.start(0, [self.relay_bin, "--listen", listen, "--target", target,
                       "--delay-ms", delay_ms, *spin], ("line", "listening on"))
        return [listen]

    def stop_servers(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        self.logs.clear()

    def run(self, tool, n_workers=0, chain=False, delay_ms=None, layers=None, insecure=False, slow=None,
            extra=(), model=None, pp=None, tg=None):
        """One measurement: servers up, idle CPUs, bench in host 0, servers down.
        layers: llama.cpp's layers per worker (Shoal's plan); slow: the index of
        the worker on a shared CPU (the primary and the others kept off it; the
        neighbour runs only while the bench does, after the idle wait); extra:
        more shoal bench options; pp, tg: instead of -p, -n
        (0: no such row, None in the result). Returns {"pp": row,
        "tg": row, "split": [(device, layers, count)], "stages": [(device,
        layers, predicted ms, measured ms)], "note": text}."""
        share = CpuShare(NEIGHBOUR_BUSY) if slow else None
        try:
            eps = self.workers(tool, n_workers, insecure, (slow, share) if slow else None)
            if delay_ms is not None:  # every worker behind its own relay
                eps = [self.relay(e, delay_ms, i)[0] for i, e in enumerate(eps)]
            common = list(self.common)
            for flag, value in (("-m", model), ("-p", pp), ("-n", tg)):
                if value is not None:
                    common[common.index(flag) + 1] = value
            if tool == "shoal":
                argv = (share.pin_others() if share else []) + [self.shoal, "bench", *common, *extra]
                if eps:
                    argv += ["--rpc", ",".join(eps), "--key-file", self.key] + (["--chain"] if chain else []) + \
                        (["--insecure"] if insecure else [])
            else:
                argv = [LLAMA / "llama-bench", *common]
                if eps:
                    ts = list(layers)
                    ts[-1] += 1  # the output layer, kept on the primary by -ot
                    argv += ["--rpc", ",".join(eps), "-ngl", sum(ts), "-ts", "/".join(map(str, ts)),
                             "-ot", r"token_embd\.weight=CPU"]
            commands.append(show(0, argv))
            for attempt in range(3):
                idle = self.args.no_idle_wait or wait_idle()
                load = open("/proc/loadavg").read().split()[:3]
                before, t0 = proc_table(), time.time()
                if share:
                    share.__enter__()
                try:
                    r = self.net.run(0, argv, timeout=BENCH_TIMEOUT_S)
                finally:
                    if share:
                        share.__exit__()
                worst = others_max_cpu(before, proc_table(), time.time() - t0)
                if r.returncode != 0:
                    servers = "".join(f"\n--- {g.name}:\n{g.read_text(errors='replace')[-2000:]}" for g in self.logs)
                    raise RuntimeError(f"exit {r.returncode}: {show(0, argv)}\n{r.stderr[-3000:]}{servers}")
                if worst[0] <= 0.10 or self.args.no_idle_wait:
                    break
                print(f"  {tool}: disturbed by {worst[1]} ({worst[0]:.0%} of a CPU)", file=sys.stderr)
            rows = json.loads(r.stdout)
            note = f"load {' '.join(load)}" + ("" if idle else ", CPUs never idle") + \
                (f", disturbed: {worst[1]} {worst[0]:.0%}" if worst[0] > 0.10 else "")
            split = [(w[0], w[2], int(w[3].strip("()"))) for w in map(str.split, r.stderr.splitlines())
                     if len(w) > 3 and w[1] == "CPU" and w[0].startswith(("local", "10.", "127."))
                     and w[3].strip("()").isdigit()]  # a device without layers shows no count
            # shoal bench's stage report: device, layers, predicted ms, measured ms, steps, error.
            stages = [(w[0], w[1], float(w[2]), float(w[3])) for w in map(str.split, r.stderr.splitlines())
                      if len(w) == 6 and w[0].startswith(("local", "10.")) and w[4].isdigit() and w[2] != "-"]
            timed = [x for x in rows if "test" not in x]
            return {"pp": next((x for x in timed if x["n_prompt"]), None), "tg": next((x for x in timed if x["n_gen"]), None),
                    "spec": [x for x in rows if x.get("test") == "greedy"],
                    "split": split, "stages": stages, "note": note, "stderr": r.stderr}
        finally:
            self.stop_servers()


def ts(row):
    return f"{row['avg_ts']:.1f} ± {row['stddev_ts']:.1f}"


def table(results, test, args):
    """One markdown table; for generation also the ms per token added to the tool's local run."""
    name = f"pp{args.p}" if test == "pp" else f"tg{args.n}"
    base, extra = results.get("local"), test == "tg" and "local" in results
    print(f"\n{name} (tokens/s, mean ± stddev of {args.r} runs)\n")
    print("| setting | shoal t/s | llama.cpp t/s | shoal / llama.cpp | shoal / shoal local | llama.cpp / llama.cpp local |"
          + (" shoal +ms/token | llama.cpp +ms/token |" if extra else ""))
    print("| ------- | --------: | ------------: | ----------------: | ------------------: | --------------------------: |"
          + (" --------------: | ------------------: |" if extra else ""))
    for label, (s, l) in results.items():
        sv, lv = s[test]["avg_ts"], l[test]["avg_ts"]
        row = f"| {label} | {ts(s[test])} | {ts(l[test])} | {sv / lv:.2f} | "
        if base:
            sb, lb = base[0][test]["avg_ts"], base[1][test]["avg_ts"]
            row += f"{sv / sb:.2f} | {lv / lb:.2f} |"
            if extra:
                row += f" {1e3 / sv - 1e3 / sb:+.2f} | {1e3 / lv - 1e3 / lb:+.2f} |"
        else:
            row += "- | - |"
        print(row)


def speed_table(speed, args):
    """--split memory against speed with one worker on a shared CPU, and each stage's predicted against measured."""
    print(f"\nSplit by memory vs by speed: primary (host 0) + worker 1 + worker 2 on a CPU whose real-time neighbour "
          f"takes {NEIGHBOUR_BUSY:.0%} of every 0.4 ms; {Path(args.speed_model).name}; tg{args.n} t/s per run\n")
    print("| split | tg t/s (each run) | layers: local / worker 1 / worker 2 |")
    print("| ----- | ----------------- | ----------------------------------- |")
    for split, runs in speed.items():
        layers = " / ".join(str(n) for _, _, n in runs[-1]["split"])
        print(f"| {split} | {', '.join(ts(r['tg']) for r in runs)} | {layers} |")
    print("\nPer stage, each run: predicted decode-step ms (the plan) vs measured (mean of the tg steps)\n")
    print("| split | run | stage | layers | predicted ms | measured ms | measured / predicted |")
    print("| ----- | --: | ----- | ------ | -----------: | ----------: | -------------------: |")
    for split, runs in speed.items():
        for i, r in enumerate(runs, 1):
            for dev, layers, pred, meas in r["stages"]:
                print(f"| {split} | {i} | {dev} | {layers} | {pred:.2f} | {meas:.2f} | {meas / pred:.2f} |")


def predicted_tg(result, split):
    """The run's own prediction for `split` (its split-choice lines on stderr), tokens/s, or None."""
    for line in (result or {}).get("stderr", "").splitlines():
        m = re.match(r"\s+(layer|tensor) split:\s+tg\s+[\d.]+ ms/token \(\s*([\d.]+) tok/s\)", line)
        if m and m[1] == split:
            return float(m[2])
    return None


def tensor_table(tensor, args):
    print(f"\nTensor split: 2 workers (hosts 1 and 2, -t 1 each) running every layer as a tensor group against the "
          f"same 2 splitting the layers (--ts 0,1,1) and one machine alone (host 0, Shoal and llama.cpp), pp512 and "
          f"tg{args.n}, tokens/s mean ± sd of {args.r}; the workers over veth, then each behind its own relay (every "
          f"link of its, the other member's too); predicted: what each run printed for its split, with the "
          f"measured over the predicted\n")
    print("| model | run | link | pp512 | tg | tg / one machine | pp / one machine | predicted tg | measured / predicted |")
    print("| ----- | --- | ---- | ----: | -: | ---------------: | ---------------: | -----------: | -------------------: |")
    names = {"llama.cpp": "one machine, llama.cpp", "local": "one machine, Shoal", "layer": "2 workers, layer split",
             "tensor": "2 workers, tensor split"}
    for model in dict.fromkeys(m for m, _, _ in tensor):
        one = tensor.get((model, "local", None))
        for (m, split, delay), r in tensor.items():
            if m != model or not one:
                continue
            p = predicted_tg(r, split)
            predicted = f"{p:.1f}" if p else "-"
            ratio = f"{r['tg']['avg_ts'] / p:.2f}" if p else "-"
            link = "-" if split in ("llama.cpp", "local") else "veth" if delay is None else f"{2 * delay:g} ms RTT"
            print(f"| {Path(model).name} | {names[split]} | {link} | {ts(r['pp'])} | {ts(r['tg'])} | "
                  f"{r['tg']['avg_ts'] / one['tg']['avg_ts']:.2f} | {r['pp']['avg_ts'] / one['pp']['avg_ts']:.2f} | "
                  f"{predicted} | {ratio} |")
    # What -sm auto would have taken at each link, from the layer run's two predictions, and which was faster.
    print()
    for model, delay in dict.fromkeys((m, d) for m, _, d in tensor):
        runs = {split: tensor.get((model, split, delay)) for split in ("layer", "tensor")}
        layer, tensor_p = predicted_tg(runs["layer"], "layer"), predicted_tg(runs["layer"], "tensor")
        if layer and tensor_p and runs["tensor"]:
            took = "tensor" if tensor_p > layer else "layer"
            faster = max(runs, key=lambda k: runs[k]["tg"]["avg_ts"])
            link = "veth" if delay is None else f"{2 * delay:g} ms RTT"
            print(f"- {Path(model).name}, {link}: -sm auto takes the {took} split (predicted {tensor_p:.1f} "
                  f"tensor against {layer:.1f} layer tok/s); measured faster: {faster}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=str(MODEL))
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--parts", default="local,veth,delay")
    ap.add_argument("--speed-model", default=str(SPEED_MODEL))
    ap.add_argument("--spec-target", default=str(SPEC_TARGET))
    ap.add_argument("--spec-draft", default=str(SPEED_MODEL))
    ap.add_argument("--spec-n", type=int, default=128, help="tokens generated in the spec part")
    ap.add_argument("--no-idle-wait", action="store_true", help="a quick check: no idle wait, no repeats")
    ap.add_argument("--time-limit", type=float, default=120, help="minutes; later settings are skipped")
    args = ap.parse_args()
    parts = args.parts.split(",")
    needs_llama = any(p in parts for p in ("local", "veth", "delay", "prefill", "tensor"))
    needs_rpc = any(p in parts for p in ("local", "veth", "delay", "prefill"))
    for f in (SHOAL, RELAY, Path(args.model)) + ((LLAMA / "llama-bench",) if needs_llama else ()) + \
            ((LLAMA / "ggml-rpc-server",) if needs_rpc else ()):
        if not f.exists():
            sys.exit(f"error: not found: {f}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: cleanup below runs

    # Jobs in order: (label, shoal options, llama.cpp options or the label whose llama.cpp row it shares).
    jobs = [("local", {}, {})] if "local" in parts else []
    for n in (1, 2, 3) if "veth" in parts else ():
        star = f"veth, {n} worker{'s' * (n > 1)}, star"
        jobs.append((star, {"n_workers": n}, {"n_workers": n}))
        if n > 1:
            jobs.append((f"veth, {n} workers, chain (llama.cpp: star)", {"n_workers": n, "chain": True}, star))
    for d in DELAYS_MS if "delay" in parts else ():
        jobs.append((f"relay {2 * d:g} ms RTT, 1 worker", {"n_workers": 1, "delay_ms": d},
                     {"n_workers": 1, "delay_ms": d}))

    # Alternated, the order flipped each round: neither mode always runs first.
    aead_jobs = [(n, insecure) for n in (1, 3) for k in range(3) for insecure in ((False, True), (True, False))[k % 2]] \
        if "aead" in parts else []
    aead = {}  # (n, insecure) -> [tg rows]
    # Memory against speed, alternated, the order flipped each round.
    speed_jobs = [split for k in range(3) for split in (("memory", "speed"), ("speed", "memory"))[k % 2]] \
        if "speed" in parts else []
    speed = {}  # split -> [results]
    # Speculative decoding: greedy generation from a code-edit prompt with and without guesses (shoal bench
    # alternates them in one run), locally and over 2 workers at 0, 1 and 5 ms round trip.
    spec_jobs = [(where, delay, kind) for where, delay in (("local", None), ("veth", None), ("relay", 0.5),
                                                           ("relay", 2.5))
                 for kind in ("draft", "ngram")] if "spec" in parts else []
    spec = {}  # (where, delay, kind) -> result
    # Pipelined prompts: pp512 and pp2048 on 2 and 3 workers, -ub 64 against -ub 0, beside llama.cpp.
    prefill_jobs = [(n, p) for n in (2, 3) for p in (512, 2048)] if "prefill" in parts else []
    prefill = {}  # (n, p) -> (pipelined, whole, llama.cpp)
    # Tensor split: per model, one machine, 2 workers by layers, 2 workers as a tensor group, the workers
    # straight over veth and behind relays at 1 and 5 ms round trip (every link of theirs, the members' too).
    tensor_jobs = [(model, split, delay) for model in (args.model, args.speed_model)
                   for split, delay in (("llama.cpp", None), ("local", None), ("layer", None), ("tensor", None),
                                        ("layer", 0.5), ("tensor", 0.5), ("layer", 2.5), ("tensor", 2.5))] \
        if "tensor" in parts else []
    tensor = {}  # (model, split, one-way delay or None) -> result

    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    built = time.strftime("%Y-%m-%d %H:%M", time.gmtime(SHOAL.stat().st_mtime))
    results, deadline = {}, time.time() + 60 * args.time_limit  # label -> (shoal, llama.cpp)
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp, Netns(n_hosts=4) as net:
        b = Bench(net, Path(tmp), args)
        for label, s_opt, l_opt in jobs:
            if time.time() > deadline:
                print(f"time limit ({args.time_limit} min) reached: skipping the rest", file=sys.stderr)
                break
            print(f"{label} ...", file=sys.stderr)
            s = b.run("shoal", **s_opt)
            layers = [n for _, _, n in s["split"][1:]]  # Shoal's plan, per worker
            l = results[l_opt][1] if isinstance(l_opt, str) else b.run("llama.cpp", **l_opt, layers=layers)
            results[label] = (s, l)
            print(f"  tg: shoal {ts(s['tg'])}, llama.cpp {ts(l['tg'])}; "
                  f"pp: shoal {ts(s['pp'])}, llama.cpp {ts(l['pp'])}", file=sys.stderr)
        for n, insecure in aead_jobs:
            if time.time() > deadline:
                break
            print(f"aead: {n} worker(s), {'--insecure' if insecure else 'sealed'} ...", file=sys.stderr)
            aead.setdefault((n, insecure), []).append(b.run("shoal", n_workers=n, insecure=insecure))
        for n, p in prefill_jobs:
            if time.time() > deadline:
                break
            print(f"prefill: pp{p}, {n} workers ...", file=sys.stderr)
            piped = b.run("shoal", n_workers=n, extra=["-ub", "64", "--split", "memory"], pp=p, tg=0)
            whole = b.run("shoal", n_workers=n, extra=["-ub", "0", "--split", "memory"], pp=p, tg=0)
            layers = [k for _, _, k in piped["split"][1:]]
            prefill[(n, p)] = (piped, whole, b.run("llama.cpp", n_workers=n, layers=layers, pp=p, tg=0))
        for where, delay, kind in spec_jobs:
            if time.time() > deadline:
                break
            print(f"spec: {kind}, {where}{f' {2 * delay:g} ms RTT' if delay else ''} ...", file=sys.stderr)
            flags = ["-md", args.spec_draft] if kind == "draft" else ["--spec-type", "ngram"]
            spec[(where, delay, kind)] = b.run(
                "shoal", n_workers=0 if where == "local" else 2, delay_ms=delay, model=args.spec_target, pp=0,
                tg=args.spec_n, extra=[*flags, "-f", SPEC_PROMPT, "--chat"])
        for model, split, delay in tensor_jobs:
            if time.time() > deadline:
                break
            print(f"tensor: {Path(model).name}, {split}{f', {2 * delay:g} ms RTT' if delay else ''} ...",
                  file=sys.stderr)
            if split == "llama.cpp":  # llama.cpp on one machine, the same core count
                tensor[(model, split, delay)] = b.run("llama.cpp", model=model, pp=512)
                continue
            # With two workers the split choice (both predictions, what -sm auto would take) is on the run's stderr.
            extra = {"local": [], "layer": ["-sm", "layer", "--ts", "0,1,1"], "tensor": ["-sm", "tensor"]}[split]
            tensor[(model, split, delay)] = b.run("shoal", n_workers=0 if split == "local" else 2, model=model,
                                                  pp=512, extra=extra, delay_ms=delay)
        for split in speed_jobs:
            if time.time() > deadline:
                break
            print(f"speed: --split {split}, worker 2 sharing its CPU ...", file=sys.stderr)
            speed.setdefault(split, []).append(
                b.run("shoal", n_workers=2, slow=2, extra=["--split", split], model=args.speed_model))

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"Machine: {cpu}, {os.cpu_count()} CPUs; model {Path(args.model).name}; every process -t 1")
    print(f"build/shoal built {built} UTC (HEAD then: {head.stdout.strip()}), copied at start")
    for test in ("tg", "pp"):
        if results:
            table(results, test, args)
    if aead:
        print(f"\nSealed link (AES-256-GCM, the default with a key) vs --insecure plain frames, Shoal star over veth, "
              f"tg{args.n} and pp{args.p} tokens/s, each the median of the alternated runs' means\n")
        print("| workers | tg sealed | tg plain | sealed / plain | pp sealed | pp plain | sealed / plain |")
        print("| ------: | --------: | -------: | -------------: | --------: | -------: | -------------: |")
        for n in sorted({n for n, _ in aead}):
            best = {ins: {t: statistics.median(r[t]["avg_ts"] for r in aead.get((n, ins), [])) for t in ("tg", "pp")}
                    for ins in (False, True) if (n, ins) in aead}
            if len(best) == 2:
                print(f"| {n} | {best[False]['tg']:.1f} | {best[True]['tg']:.1f} | {best[False]['tg'] / best[True]['tg']:.3f} "
                      f"| {best[False]['pp']:.1f} | {best[True]['pp']:.1f} | {best[False]['pp'] / best[True]['pp']:.3f} |")
    if prefill:
        print("\nPipelined prompts (Shoal -ub 64: micro-batches flow through the stages, every machine busy) "
              "against whole batches stage after stage (-ub 0) and llama.cpp RPC with the same split; "
              "Shoal -b 256, llama-bench its defaults; tokens/s, star over veth\n")
        print("| test | workers | shoal pipelined | shoal whole | pipelined / whole | llama.cpp | pipelined / llama.cpp |")
        print("| ---- | ------: | --------------: | ----------: | ----------------: | --------: | --------------------: |")
        for (n, p), (piped, whole, llama) in prefill.items():
            a, w, l = piped["pp"]["avg_ts"], whole["pp"]["avg_ts"], llama["pp"]["avg_ts"]
            print(f"| pp{p} | {n} | {ts(piped['pp'])} | {ts(whole['pp'])} | {a / w:.2f} | {ts(llama['pp'])} | "
                  f"{a / l:.2f} |")
    if spec:
        print(f"\nSpeculative decoding: greedy generation of {args.spec_n} tokens from {SPEC_PROMPT.name} (chat), "
              f"target {Path(args.spec_target).name}, draft {Path(args.spec_draft).name} or n-gram lookup; plain and "
              f"speculative runs alternated in one shoal bench (the same tokens checked), tokens/s mean of {args.r}\n")
        print("| setting | layers (primary, workers) | guesses | plain t/s | speculative t/s | speed-up | guessed tokens right |")
        print("| ------- | ------------------------- | ------- | --------: | --------------: | -------: | -------------------: |")
        for (where, delay, kind), r in spec.items():
            plain, fast = r["spec"][0], r["spec"][1]
            setting = "local" if where == "local" else "2 workers, veth" if delay is None else \
                f"2 workers, {2 * delay:g} ms RTT"
            right = f"{fast['accepted']} of {fast['drafted']} ({100 * fast['accepted'] / max(1, fast['drafted']):.0f} %)"
            layers = " / ".join(str(n) for _, _, n in r["split"]) or "all"
            print(f"| {setting} | {layers} | {kind} | {plain['avg_ts']:.2f} | {fast['avg_ts']:.2f} | "
                  f"{fast['avg_ts'] / plain['avg_ts']:.2f} | {right} |")
    if tensor:
        tensor_table(tensor, args)
    if speed:
        speed_table(speed, args)
    print("\nSplits (Shoal's plan, printed by shoal bench; llama.cpp given the same) and conditions:\n")
    for label, (s, l) in results.items():
        split = ", ".join(f"{d} {r}" for d, r, _ in s["split"]) or "all local"
        print(f"- {label}: {split}; shoal {s['note']}; llama.cpp {l['note']}")
    print("\nCommands, in order (hosts are namespaces shoal-test-<pid>-<i>, 10.77.k.i+1):\n")
    for c in commands:
        print("    " + c)


if __name__ == "__main__":
    main()
