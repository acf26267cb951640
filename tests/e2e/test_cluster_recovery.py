"""A cluster that heals: `shoal serve` over three workers on loopback (or in
network namespaces) loses one in the middle of a streamed greedy completion
— killed, stopped, or its link cut — and the stream completes with the same
text as an undisturbed run. A stalled worker that is continued is used again;
when what is left cannot hold the model, requests get 503 with the reason
and the server heals once the worker is back. Each test prints how long the
loss took to notice and the cluster to recover.

Every wait is bounded; workers and servers are stopped after each test."""
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

from conftest import ManagedProcess, random_model, run_shoal
from server_fixtures import STORY_PROMPT as PROMPT, Server, cluster, complete, netns_stream_with_cut, stream_with_fault
from shoal_wire import PING, PONG, Peer, STATS, STATS_REPLY

# Runs alone, not beside other tests (how soon a lost worker is noticed, measured against the
# timeout): scripts/test runs the serial tests after the others, which go two at a time.
pytestmark = pytest.mark.serial

TIMEOUT = 2  # --worker-timeout in these tests (seconds), as conftest.serve_cluster's
N = 64       # tokens per completion (ignore_eos keeps every run this long; server_fixtures' default)
ROOT = Path(__file__).resolve().parents[2]


def member_states(server):
    return {m["address"]: m["state"] for m in cluster(server)["workers"]}


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def report(name, server, fault_at):
    c = cluster(server)
    detect = c["throughput"]["last_loss_unix"] - fault_at
    recovery = c["throughput"]["last_recovery_seconds"]
    print(f"\n{name}: loss noticed after {detect:.2f} s, cluster rebuilt and KV replayed in {recovery:.2f} s")
    return detect, recovery


@pytest.mark.quick
def test_killed_worker_mid_stream_gives_the_same_text(serve_cluster, workers):
    ws = workers(3, "--worker-timeout", TIMEOUT)
    s = serve_cluster(ws)
    expected = complete(s)
    victim = ws[1]

    def kill():
        victim.proc.kill()

    text, fault_at = stream_with_fault(s, kill)
    assert text == expected
    detect, _ = report("kill -9", s, fault_at)
    assert detect < TIMEOUT + 1
    states = member_states(s)
    assert states[victim.address] == "lost" and states[ws[0].address] == "active"
    assert s.metrics()[f'shoal_worker_up{{device="{victim.address}"}}'] == 0
    assert complete(s) == expected  # and on without it


@pytest.mark.parametrize("name", ["random-qwen35", "random-qwen35moe", "random-gpt-oss", "random-deepseek2",
                                  "random-qwen3next", "random-glm4moe", "random-minimax-m2", "random-gemma4moe", "random-gemma4e"])
def test_killed_worker_holding_recurrent_state_gives_the_same_text(shoal_bin, workers, tmp_path, name):
    """Qwen3.5's DeltaNet layers keep a recurrent state (not a KV cache) on
    the worker that holds them, gpt-oss's windowed layers a ring of 128
    positions, DeepSeek's latent attention a cache of latents; the replay
    into the new stages rebuilds each, and the text is the undisturbed
    run's."""
    model = random_model(name)
    ws = workers(2, "--worker-timeout", TIMEOUT)
    s = Server(shoal_bin, model, tmp_path, "--rpc", ",".join(w.address for w in ws), "--worker-timeout", TIMEOUT,
               "-c", 512, threads=1)
    s.model = Path(model).name
    try:
        expected = complete(s, n=256)
        text, fault_at = stream_with_fault(s, ws[1].proc.kill, n=256)
        assert text == expected
        report(f"kill -9 ({name})", s, fault_at)
        assert member_states(s)[ws[1].address] == "lost"
        assert complete(s, n=256) == expected
    finally:
        s.stop()


def test_stalled_worker_mid_stream_gives_the_same_text_and_rejoins(serve_cluster, workers):
    ws = workers(3, "--worker-timeout", TIMEOUT)
    s = serve_cluster(ws)
    expected = complete(s)
    victim = ws[2]

    def stop():
        victim.proc.send_signal(signal.SIGSTOP)

    text, fault_at = stream_with_fault(s, stop)
    assert text == expected
    detect, _ = report("SIGSTOP", s, fault_at)
    assert detect < TIMEOUT + 1.5  # silent for the timeout, not a hang
    assert member_states(s)[victim.address] == "lost"

    # Continued: it answers again and takes layers at the next re-plan.
    victim.proc.send_signal(signal.SIGCONT)
    wait_for("the continued worker is active again", lambda: member_states(s)[victim.address] == "active",
             timeout=TIMEOUT * 4 + 10)
    assert complete(s) == expected
    assert victim.alive()


def test_cut_link_mid_stream_gives_the_same_text(shoal_bin, smollm2, tmp_path, netns):
    """The primary in one namespace, three workers in theirs on one bridge;
    one worker's veth goes down in the middle of a stream."""
    key = tmp_path / "key"
    key.write_text(secrets.token_hex(32))
    net = netns(4)
    try:
        worker_procs = []
        for i in (1, 2, 3):
            p = net.popen(i, [shoal_bin, "worker", "--host", net.addr(i), "--port", 50052, "-t", 1, "--key-file",
                              key, "--no-cache", "--worker-timeout", TIMEOUT],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert "listening on" in p.stdout.readline()
            worker_procs.append(p)
        log = open(tmp_path / "primary.log", "w+")
        primary = net.popen(0, [shoal_bin, "serve", "-m", smollm2, "--host", net.addr(0), "--port", 8080, "-t", 1,
                                "-c", 512, "--key-file", key, "--worker-timeout", TIMEOUT, "--rpc",
                                ",".join(f"{net.addr(i)}:50052" for i in (1, 2, 3))],
                            stdout=subprocess.PIPE, stderr=log, text=True)
        assert "listening" in primary.stdout.readline()
        base = f"http://{net.addr(0)}:8080"
        client = [sys.executable, ROOT / "tests/tools/stream_client.py", base, PROMPT, N]

        def health_ok():
            r = net.run(0, ["python3", "-c", f"import urllib.request; urllib.request.urlopen('{base}/health')"],
                        timeout=10)
            return r.returncode == 0

        wait_for("the primary is ready", health_ok, timeout=120)
        expected, text, cut_at, cut_wall = netns_stream_with_cut(net, client, 2)
        took = time.monotonic() - cut_at
        assert text == expected
        log.flush()
        log.seek(0)
        primary_log = log.read()
        assert f"worker {net.addr(2)}:50052 lost" in primary_log, primary_log
        r = net.run(0, ["python3", "-c", "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("
                                         f"'{base}/v1/cluster').read().decode())"], timeout=10)
        t = json.loads(r.stdout)["throughput"]
        print(f"\nlink cut: loss noticed after {t['last_loss_unix'] - cut_wall:.2f} s, cluster rebuilt and KV "
              f"replayed in {t['last_recovery_seconds']:.2f} s; the stream finished {took:.2f} s after the cut "
              f"(timeout {TIMEOUT} s)")

        # The link back: the worker is used again at the next re-plan.
        net.restore(2)
        victim = f"{net.addr(2)}:50052"

        def state_of_victim():
            r = net.run(0, ["python3", "-c", "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("
                                             f"'{base}/v1/cluster').read().decode())"], timeout=10)
            members = json.loads(r.stdout)["workers"] if r.returncode == 0 else []
            return {m["address"]: m["state"] for m in members}.get(victim)

        wait_for("the restored worker is active again", lambda: state_of_victim() == "active", timeout=30)
        again = net.run(0, client, timeout=120).stdout.splitlines()
        assert "".join(json.loads(line).get("text", "") for line in again) == expected
    finally:
        net.close()


def test_stalled_or_killed_primary_frees_the_worker(shoal_bin, smollm2, workers, tmp_path):
    [w] = workers(1, "--worker-timeout", TIMEOUT)

    def good_run():
        r = run_shoal(shoal_bin, "run", "-m", smollm2, "-p", PROMPT, "-n", 4, "--temp", 0, "--rpc", w.address,
                      "--tensor-split", "0,1", timeout=60)
        assert r.returncode == 0, r.stderr

    for sig in (signal.SIGSTOP, signal.SIGKILL):
        primary = subprocess.Popen([shoal_bin, "run", "-m", str(smollm2), "-p", PROMPT, "-n", "-1", "--ignore-eos",
                                    "-c", "2048", "--rpc", w.address, "--tensor-split", "0,1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert primary.stdout.read(64)  # generating
            primary.send_signal(sig)
            stopped_at = time.monotonic()
            # While a stopped primary holds it, the worker is busy; within the
            # timeout it lets go and serves the next primary.
            def free():
                peer = Peer(w.port)
                try:
                    peer.handshake()
                    peer.send_json(PING, {"t": 1}, request_id=1)
                    return peer.recv_json()["type"] == PONG  # not ERROR "busy"
                finally:
                    peer.close()

            assert not free() or sig == signal.SIGKILL
            wait_for("the worker frees its stage", free, timeout=TIMEOUT + 3)
            print(f"\nprimary {signal.Signals(sig).name}: worker free after {time.monotonic() - stopped_at:.2f} s")
            good_run()
        finally:
            primary.send_signal(signal.SIGCONT)
            primary.kill()
            primary.wait()
    assert w.alive()


def worker_stats(worker):
    peer = Peer(worker.port)
    peer.handshake(role="peer")  # the primary holds the worker; a peer may still read its STATS
    peer.send_json(STATS, {}, request_id=1)
    reply = peer.recv_json()
    peer.close()
    assert reply["type"] == STATS_REPLY
    return reply["json"]


def test_degraded_then_healed_without_a_restart(serve_cluster, workers):
    """The primary may hold only the embedding and head (--mem), so with its
    one worker gone nothing can run the layers: 503 with the reason, the
    server stays up, and heals when the worker returns — from its cache."""
    [w] = workers(1, "--worker-timeout", TIMEOUT)
    s = serve_cluster([w], "--mem", "320M")
    expected = complete(s, n=8)
    w.proc.kill()
    w.proc.wait()
    with pytest.raises(openai.APIStatusError) as e:
        complete(s, n=8)
    assert e.value.status_code == 503 and e.value.code == "cluster_unavailable"
    assert "does not fit" in str(e.value) and w.address in str(e.value)
    status, health = s.get_json("/health")
    assert status == 503 and health["status"] == "degraded" and "does not fit" in health["reason"]
    devices = {d["address"]: d["state"] for d in cluster(s)["devices"]}
    assert devices[w.address] == "degraded"  # the lost one is named, the rest ready
    assert all(state == "ready" for address, state in devices.items() if address != w.address)
    assert s.alive()

    w2 = workers.restart(w)  # same port, same cache dir
    wait_for("the server heals", lambda: s.get_json("/health")[0] == 200, timeout=30)
    assert complete(s, n=8) == expected
    assert worker_stats(w2)["weight_bytes_received"] == 0  # all from its cache
    assert cluster(s)["state"] == "ready"


def test_chaos_every_request_is_right_or_a_clear_503(serve_cluster, workers):
    """100 greedy requests from 4 clients while workers are killed, stopped,
    continued and restarted at random: each ends with the undisturbed text
    or a 503; none wrong, none hung."""
    rng = random.Random(7)
    ws = workers(3, "--worker-timeout", TIMEOUT)
    s = serve_cluster(ws, "--parallel", 4, "--mem", "320M")
    prompts = [f"{PROMPT} {name}" for name in ("a dragon", "a fox", "two sisters", "an old sailor")]
    expected = {p: complete(s, p, n=16) for p in prompts}
    counts = {"same": 0, "503": 0, "wrong": 0, "other": 0}
    lock = threading.Lock()
    done = threading.Event()

    def client_loop(k):
        c = s.client(timeout=60)
        for i in range(25):
            p = prompts[(k + i) % len(prompts)]
            try:
                r = c.completions.create(model=s.model, prompt=p, max_tokens=16, temperature=0,
                                         extra_body={"ignore_eos": True})
                outcome = "same" if r.choices[0].text == expected[p] else "wrong"
            except openai.APIStatusError as e:
                outcome = "503" if e.status_code == 503 else "other"
            except openai.APIError:
                outcome = "other"
            with lock:
                counts[outcome] += 1

    def chaos():
        alive = list(ws)
        while not done.is_set():
            time.sleep(rng.uniform(1.0, 3.0))
            i = rng.randrange(len(alive))
            w = alive[i]
            action = rng.choice(["kill", "stop", "restart"])
            if action == "kill" and w.alive():
                w.proc.kill()
                w.proc.wait()
            elif action == "stop" and w.alive():
                w.proc.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(0.5, 3.0))
                w.proc.send_signal(signal.SIGCONT)
            elif not w.alive():
                alive[i] = workers.restart(w)

    clients = [threading.Thread(target=client_loop, args=(k,)) for k in range(4)]
    monkey = threading.Thread(target=chaos)
    start = time.monotonic()
    monkey.start()
    for t in clients:
        t.start()
    for t in clients:
        t.join(timeout=300)
    done.set()
    monkey.join(timeout=30)
    print(f"\nchaos: {counts} in {time.monotonic() - start:.1f} s; "
          f"{cluster(s)['throughput']['replans']} re-plans")
    assert not any(t.is_alive() for t in clients), "a client hung"
    assert counts["wrong"] == 0 and counts["other"] == 0, counts
    assert counts["same"] + counts["503"] == 100
    assert s.alive()


def test_shoal_run_recovers_from_a_killed_worker_with_the_same_text(shoal_bin, smollm2, workers):
    """`shoal run` heals as `shoal serve` does: a worker killed mid-generation
    is planned around, the sequence replayed, and the text is the one an
    undisturbed run prints."""
    ws = workers(2, "--worker-timeout", TIMEOUT)
    args = [shoal_bin, "run", "-m", smollm2, "-p", PROMPT, "-n", 200, "--temp", 0, "--ignore-eos", "--no-echo",
            "-t", 1, "-c", 512, "--worker-timeout", TIMEOUT, "--rpc", ",".join(w.address for w in ws)]
    expected = run_shoal(*args, timeout=300)
    assert expected.returncode == 0, expected.stderr
    p = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        got = b""
        while len(got) < 40:  # generation has begun (raw reads: communicate() reads the same descriptor)
            piece = os.read(p.stdout.fileno(), 40 - len(got))
            assert piece, p.stderr.read().decode()
            got += piece
        ws[1].proc.kill()
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err.decode()
    assert (got + out).decode() == expected.stdout
    assert "re-planning and replaying" in err.decode()


def test_a_returning_worker_does_not_stall_running_streams(serve_cluster, workers):
    """A worker that comes back while streams run joins at the next quiet
    moment: the streams see no re-plan, no replay (their longest pause is
    printed beside their median), and the worker takes layers once they end."""
    ws = workers(3, "--worker-timeout", TIMEOUT)
    s = serve_cluster(ws, "--parallel", 4)
    victim = ws[2]
    victim.proc.kill()
    wait_for("the killed worker is lost", lambda: member_states(s)[victim.address] == "lost", timeout=TIMEOUT * 3)
    complete(s, n=4)  # re-planned around it
    gaps, texts = [[] for _ in range(4)], [None] * 4
    back = threading.Event()

    def stream(i):
        last = time.monotonic()
        out = ""
        for chunk in s.client().completions.create(model=s.model, prompt=PROMPT, max_tokens=400, temperature=0,
                                                   stream=True, extra_body={"ignore_eos": True}):
            now = time.monotonic()
            if back.is_set():
                gaps[i].append(now - last)
            last = now
            out += chunk.choices[0].text
        texts[i] = out

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    restarted = workers.restart(victim)
    back.set()
    wait_for("the returning worker answers", lambda: member_states(s)[restarted.address] in ("rejoining", "active"),
             timeout=TIMEOUT * 4 + 10)
    streaming = any(t.is_alive() for t in threads)
    state_while_streaming = member_states(s)[restarted.address]
    for t in threads:
        t.join(timeout=300)
    assert all(texts) and len(set(texts)) == 1
    # Answering while the streams still ran, it waited for them to end.
    assert streaming, "the streams ended before the worker answered: nothing was measured"
    assert state_while_streaming == "rejoining"
    wait_for("the returning worker is active", lambda: member_states(s)[restarted.address] == "active", timeout=30)
    all_gaps = sorted(g for gs in gaps for g in gs)
    print(f"\nstreams while a worker returned: longest pause {max(all_gaps) * 1e3:.0f} ms, "
          f"median {all_gaps[len(all_gaps) // 2] * 1e3:.1f} ms")
    assert complete(s, n=400) == texts[0]  # and the same text over the new split
