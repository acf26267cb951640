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
from shoal_wire import ERROR, FORWARD, HELLO, STATS, Peer, header

PROMPT = "Once upon a time"


@pytest.fixture
def keyed(shoal_bin, shared, workers, tmp_path):
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32))
    (w,) = workers(1, key_file=key)
    model = shared / "models/stories260K.gguf"
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
    expect_error_and_close(peer, "version mismatch", "v1", "v99")

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
    holder = Peer(w.port)
    assert holder.handshake(key=key.read_text())["type"] != ERROR
    r = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", "4", "--rpc", w.address, "--key-file", key,
                  timeout=30)
    assert r.returncode == 1 and "busy" in r.stderr, r.stderr
    holder.close()
    time.sleep(0.2)  # the worker notices the holder left
    good_run()
    assert w.alive()


def test_primary_reports_a_worker_of_another_version(shoal_bin, shared):
    """A fake worker speaking protocol v2: the primary stops at once with
    both versions named."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def fake_worker():
        conn, _ = server.accept()
        conn.recv(65536)
        body = b'{"protocol": 2, "role": "worker", "nonce": "00", "auth": false}'
        conn.sendall(header(HELLO, len(body), version=2) + body)
        time.sleep(2)
        conn.close()

    t = threading.Thread(target=fake_worker, daemon=True)
    t.start()
    start = time.monotonic()
    r = run_shoal(shoal_bin, "run", "-m", shared / "models/stories260K.gguf", "-p", "x", "-n", "2",
                  "--rpc", f"127.0.0.1:{port}", timeout=30)
    assert r.returncode == 1
    assert "version mismatch" in r.stderr and "v1" in r.stderr and "v2" in r.stderr, r.stderr
    assert time.monotonic() - start < 5  # bounded: the primary does not wait out the peer
    server.close()


def test_worker_refuses_open_address_without_key(shoal_bin):
    r = run_shoal(shoal_bin, "worker", "--host", "0.0.0.0", "--port", "0", timeout=30)
    assert r.returncode == 1 and "without a cluster key" in r.stderr and "--insecure" in r.stderr
