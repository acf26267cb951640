"""One worker process, every kind of bad peer in turn — no key, wrong key,
wrong protocol version, a frame claiming 100 GB, random garbage, a primary
that vanishes mid-FORWARD, a second primary — and after each the worker is
up and serves the next primary correctly."""
import os
import secrets
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import run_shoal
from shoal_wire import (ERROR, FORWARD, HELLO, LINK_PROBE, LINK_PROBE_ECHO, PROBE, PROBE_RESULT, STATS, VERSION, Peer,
                        header, served_peer)

# Runs alone, not beside other tests (a worker's CPU share measured while 1,000 strangers hang on):
# scripts/test runs the serial tests after the others, which go two at a time.
pytestmark = pytest.mark.serial

PROMPT = "Once upon a time"


@pytest.fixture
def keyed(shoal_bin, test_data, workers, tmp_path):
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32))
    (w,) = workers(1, key_file=key)
    model = test_data / "models/stories260K.gguf"
    local = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", "24", "--temp", "0")
    assert local.returncode == 0

    def good_run():
        r = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", "24", "--temp", "0",
                      "--rpc", w.address, "--key-file", key, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout == local.stdout
        assert w.alive()

    return w, key, model, good_run


def expect_error_and_close(peer, *words):
    reply = peer.recv_json()
    assert reply["type"] == ERROR, reply
    message = reply["json"]["message"]
    for word in words:
        assert word in message, message
    peer.sock.settimeout(1.0)  # closed within a second, never a hang
    assert peer.closed()
    peer.close()
    return message


def test_worker_survives_every_bad_peer(shoal_bin, keyed, tmp_path):
    w, key, model, good_run = keyed
    good_run()

    # No key, then a wrong key: a clear refusal on the primary's side.
    r = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", "4", "--rpc", w.address, timeout=30)
    assert r.returncode == 1 and "requires a cluster key" in r.stderr, r.stderr
    wrong = tmp_path / "wrong.key"
    wrong.write_text(secrets.token_hex(32))
    r = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", "4", "--rpc", w.address, "--key-file", wrong,
                  timeout=30)
    assert r.returncode == 1 and "wrong cluster key" in r.stderr, r.stderr
    good_run()

    # Skipping authentication and asking for something anyway.
    peer = Peer(w.port)
    hello = peer.handshake(key=None)
    assert hello["type"] == HELLO and hello["json"]["auth"] is True
    peer.send_json(STATS, {})
    expect_error_and_close(peer, "requires a cluster key")

    # Another protocol version: the answer names both versions.
    peer = Peer(w.port)
    peer.send_json(HELLO, {"protocol": 99, "role": "primary", "nonce": "00"}, version=99)
    expect_error_and_close(peer, "version mismatch", f"v{VERSION}", "v99")

    # A frame claiming 100 GB: refused before any allocation.
    peer = Peer(w.port)
    peer.sock.sendall(header(HELLO, 100 * 10**9))
    expect_error_and_close(peer, "exceeds the limit")

    # Random garbage.
    peer = Peer(w.port)
    peer.sock.sendall(os.urandom(4096))
    expect_error_and_close(peer, "bad frame magic")
    good_run()

    # An authenticated primary that sends half a FORWARD and vanishes.
    peer = Peer(w.port)
    assert peer.handshake(key=key.read_text())["type"] != ERROR
    peer.sock.sendall(header(FORWARD, 4096) + b"\0" * 100)
    peer.close()
    good_run()

    # A real primary killed in the middle of a long generation.
    proc = subprocess.Popen([shoal_bin, "run", "-m", str(model), "-p", PROMPT, "-n", "-1", "--ignore-eos", "-c", "2048",
                             "--rpc", w.address, "--key-file", str(key)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout.read(64)  # generating
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    good_run()

    # A second primary while one is connected is told the worker is busy.
    # (The holder is served first: the good run's primary may take a moment to be let go.)
    holder = served_peer(w.port, key=key.read_text())
    r = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", "4", "--rpc", w.address, "--key-file", key,
                  timeout=30)
    assert r.returncode == 1 and "busy" in r.stderr, r.stderr
    holder.close()
    time.sleep(0.2)  # the worker notices the holder left
    good_run()
    assert w.alive()


def test_probes_answer_and_bad_probes_are_refused(keyed):
    """LINK_PROBE echoes its bytes; PROBE times the asked type and a layer's
    matrices; a PROBE for no weight type, rows of part blocks, too many or
    too large matrices gets a clear error; the worker serves the next
    primary."""
    w, key, model, good_run = keyed
    peer = Peer(w.port)
    hello = peer.handshake(key=None)  # the worker's HELLO, before authentication
    assert {"link-probe", "probe"} <= set(hello["json"]["capabilities"]), hello
    peer.close()
    peer = Peer(w.port)
    assert peer.handshake(key=key.read_text())["type"] != ERROR
    data = os.urandom(70000)
    peer.send(LINK_PROBE, data, request_id=7)
    echo = peer.recv()
    assert echo["type"] == LINK_PROBE_ECHO and echo["payload"] == data and echo["id"] == 7
    peer.send_json(PROBE, {"type": 8, "cols": 896}, request_id=8)  # Q8_0, a Qwen2.5-0.5B row
    r = peer.recv_json()
    assert r["type"] == PROBE_RESULT and r["json"]["type"] == "Q8_0", r
    assert r["json"]["matvec_gbps"] > 0 and r["json"]["matmul_gflops"] > 0
    # A layer's matrices (Q8_0 896 x 896, Q6_K 896 x 4864): timed in order.
    peer.send_json(PROBE, {"type": 8, "cols": 896, "matrices": [[8, 896, 896], [14, 896, 4864]]}, request_id=8)
    r = peer.recv_json()
    assert r["type"] == PROBE_RESULT and "2 layer matrices" in r["json"]["probe"], r
    assert r["json"]["matvec_gbps"] > 0 and r["json"]["matmul_gflops"] > 0
    # A bad request is answered with ERROR; the link stays up for the next one.
    for body, words in (({"type": 12, "cols": 896}, "whole blocks"),  # Q4_K blocks are 256 wide
                        ({"type": 15, "cols": 4096}, "weight type"),  # Q8_K: activations only
                        ({"type": "q4_0"}, "weight type"),
                        ({"type": 2, "cols": 4096.5}, "cols must be an integer"),
                        ({"type": 2, "matrices": [[2, 0, 4096]]}, "0 rows"),
                        ({"type": 2, "matrices": [[2, 64, 4001]]}, "whole blocks"),
                        ({"type": 2, "matrices": [[2, 64]]}, "[type, rows, cols]"),
                        ({"type": 2, "matrices": [[2, 8, 32]] * 513}, "at most 512"),
                        ({"type": 2, "matrices": [[2, 1 << 21, 32]]}, "rows (1 to")):
        peer.send_json(PROBE, body, request_id=9)
        reply = peer.recv_json()
        assert reply["type"] == ERROR and words in reply["json"]["message"], reply
    peer.send(LINK_PROBE, b"still here", request_id=10)
    assert peer.recv()["payload"] == b"still here"
    peer.close()
    good_run()


def test_primary_reports_a_worker_of_another_version(shoal_bin, test_data):
    """A fake worker speaking the next protocol version: the primary stops at
    once with both versions named."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def fake_worker():
        conn, _ = server.accept()
        conn.recv(65536)
        body = b'{"protocol": %d, "role": "worker", "nonce": "00", "auth": false}' % (VERSION + 1)
        conn.sendall(header(HELLO, len(body), version=VERSION + 1) + body)
        time.sleep(2)
        conn.close()

    t = threading.Thread(target=fake_worker, daemon=True)
    t.start()
    start = time.monotonic()
    r = run_shoal(shoal_bin, "run", "-m", test_data / "models/stories260K.gguf", "-p", "x", "-n", "2",
                  "--rpc", f"127.0.0.1:{port}", timeout=30)
    assert r.returncode == 1
    assert "version mismatch" in r.stderr and f"v{VERSION}" in r.stderr and f"v{VERSION + 1}" in r.stderr, r.stderr
    assert time.monotonic() - start < 5  # bounded: the primary does not wait out the peer
    server.close()


def test_worker_refuses_open_address_without_key(shoal_bin):
    r = run_shoal(shoal_bin, "worker", "--host", "0.0.0.0", "--port", "0", timeout=30)
    assert r.returncode == 1 and "without a cluster key" in r.stderr and "--insecure" in r.stderr


def cpu_seconds(pid):
    """User + system CPU time of a process so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_flood_of_strangers_under_tight_limits(shoal_bin, test_data, tmp_path):
    """A worker with 64 file descriptors and 1.5 GB of address space, hit by
    a 256 MiB frame header before authentication and 1,000 connections that
    say nothing: it refuses what it cannot take, stays idle (< 5 % CPU) while
    they hang on, ends them within its timeout, and then serves a real
    primary. Bounded: about 15 s."""
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32))
    log = open(tmp_path / "worker.log", "w+")
    proc = subprocess.Popen(["prlimit", "--nofile=64", "--as=1500000000", shoal_bin, "worker", "--port", "0", "-t", "1",
                             "--no-cache", "--key-file", str(key), "--worker-timeout", "2"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on" in line, line
        port = int(line.split()[3].rsplit(":", 1)[1])

        # A chain peer that says HELLO and nothing more is let go after the timeout.
        key_text = key.read_text()
        peer = Peer(port)
        assert peer.handshake(key=key_text, role="peer")["type"] != ERROR
        start = time.monotonic()
        peer.sock.settimeout(5)
        while not peer.closed():
            assert time.monotonic() - start < 4, "a silent peer session was kept"
        print(f"\nsilent peer session ended after {time.monotonic() - start:.1f} s")
        peer.close()

        # 256 MiB promised before authentication: refused, nothing allocated.
        peer = Peer(port)
        peer.sock.sendall(header(HELLO, 256 << 20))
        expect_error_and_close(peer, "exceeds the limit")

        # 1,000 silent connections (most wait in the backlog or are refused).
        socks = []
        for _ in range(1000):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            socks.append(s)
        time.sleep(0.5)
        before, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(2.0)
        share = (cpu_seconds(proc.pid) - before) / (time.monotonic() - t0)
        print(f"\nworker CPU while 1,000 strangers hang on: {100 * share:.1f} %")
        assert share < 0.05
        assert proc.poll() is None
        for s in socks:
            s.close()

        # The strangers gone (or timed out), a real primary is served.
        model = test_data / "models/stories260K.gguf"
        local = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", "16", "--temp", "0")
        deadline = time.monotonic() + 10
        while True:
            r = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", "16", "--temp", "0", "--rpc",
                          f"127.0.0.1:{port}", "--key-file", key, timeout=60)
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert r.returncode == 0, r.stderr
        assert r.stdout == local.stdout
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
        log.close()
