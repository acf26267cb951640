"""The link simulator the project's network tests use: the TCP delay relay
(tests/tools/delay_relay.cpp) and the network-namespace helper
(tests/tools/netns.py). Loopback and test-made namespaces only.

Timing asserts are lower bounds only: a delay or rate the tool promises is a
correctness property; how fast it goes otherwise is not tested here."""
import hashlib
import os
import select
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tools"))
import netns  # noqa: E402

RELAY = os.environ.get("SHOAL_DELAY_RELAY", str(ROOT / "build" / "shoal_delay_relay"))
T = 10  # per-socket-operation timeout, seconds

# Runs alone, not beside other tests (the delays and rates a relay adds, measured): scripts/test
# runs the serial tests after the others, which go two at a time.
pytestmark = pytest.mark.serial


# --- helpers -------------------------------------------------------------------

class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        s.settimeout(T)
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


@pytest.fixture
def echo():
    srv = _Server(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


class Relay:
    def __init__(self, target_port, *args):
        if not Path(RELAY).exists():
            pytest.fail(f"delay relay not found at {RELAY}: build it or set SHOAL_DELAY_RELAY")
        self.p = subprocess.Popen([RELAY, "--listen", "127.0.0.1:0",
                                   "--target", f"127.0.0.1:{target_port}", *map(str, args)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.p.stdout], [], [], T)
        line = self.p.stdout.readline() if ready else ""
        if not line.startswith("listening on "):
            self.stop()
            pytest.fail(f"relay did not start: {line!r}")
        self.port = int(line.strip().rsplit(":", 1)[1])

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=T)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=T)
        self.p.stdout.close()
        self.p.stderr.close()


@pytest.fixture
def relay():
    made = []

    def start(target_port, *args):
        r = Relay(target_port, *args)
        made.append(r)
        return r
    yield start
    for r in made:
        r.stop()


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(65536, n - len(buf)))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def echo_through(s, payload):
    """Send payload (from a thread) while reading the echo; returns what came back."""
    err = []

    def send():
        try:
            s.sendall(payload)
        except OSError as e:
            err.append(e)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    got = recv_exact(s, len(payload))
    t.join(T)
    assert not err, err
    return got


def ping_rtt(s, n=5):
    rtts = []
    for _ in range(n):
        t0 = time.monotonic()
        s.sendall(b"x")
        assert recv_exact(s, 1) == b"x"
        rtts.append(time.monotonic() - t0)
    return rtts


# --- relay ----------------------------------------------------------------------

def test_echo_1mib_intact(echo, relay):
    r = relay(echo, "--delay-ms", 0)
    payload = os.urandom(1 << 20)
    with r.connect() as s:
        got = echo_through(s, payload)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(payload).hexdigest()


def test_echo_1mib_intact_with_delay(echo, relay):
    r = relay(echo, "--delay-ms", 2)
    payload = os.urandom(1 << 20)
    with r.connect() as s:
        got = echo_through(s, payload)
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()


def test_many_sequential_connections(echo, relay):
    r = relay(echo, "--delay-ms", 0)
    for i in range(300):
        with r.connect() as s:
            msg = struct.pack("<I", i) * 16
            s.sendall(msg)
            assert recv_exact(s, len(msg)) == msg
    assert r.p.poll() is None


def test_many_concurrent_connections(echo, relay):
    r = relay(echo, "--delay-ms", 1)
    errors = []

    def one(i):
        try:
            with r.connect() as s:
                payload = os.urandom(64 * 1024 + i)
                assert echo_through(s, payload) == payload
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:3]


def test_delay_is_a_lower_bound_on_rtt(echo, relay):
    r = relay(echo, "--delay-ms", 20)
    with r.connect() as s:
        rtts = ping_rtt(s)
    assert min(rtts) >= 0.040, rtts


def test_asymmetric_delay(echo, relay):
    r = relay(echo, "--delay-ms", 1, "--delay-up-ms", 5, "--delay-down-ms", 30)
    with r.connect() as s:
        rtts = ping_rtt(s)
    assert min(rtts) >= 0.035, rtts


def test_sub_millisecond_delay_honoured(echo, relay):
    r = relay(echo, "--delay-ms", 0.05)  # 0.1 ms round trip
    with r.connect() as s:
        rtts = ping_rtt(s, 50)
    assert min(rtts) >= 0.0001, rtts


def test_rate_limit_lower_bound(echo, relay):
    r = relay(echo, "--delay-ms", 0, "--rate-mbit", 40)
    payload = os.urandom(2 << 20)  # 2 MiB at 5 MB/s: ~0.42 s each way
    with r.connect() as s:
        t0 = time.monotonic()
        got = echo_through(s, payload)
        elapsed = time.monotonic() - t0
    assert got == payload
    assert elapsed >= 0.35, elapsed


def test_half_close_forwarded(echo, relay):
    r = relay(echo, "--delay-ms", 3)
    with r.connect() as s:
        s.sendall(b"hello, half-closed world")
        s.shutdown(socket.SHUT_WR)  # echo server replies, then closes on our EOF
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    assert got == b"hello, half-closed world"


def test_reset_from_target_closes_client(relay):
    ls = socket.create_server(("127.0.0.1", 0))
    ls.settimeout(T)
    r = relay(ls.getsockname()[1], "--delay-ms", 0)
    with r.connect() as s:
        s.sendall(b"ping")
        conn, _ = ls.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # RST
        s.settimeout(5)
        try:
            assert s.recv(10) == b""
        except ConnectionResetError:
            pass
    ls.close()
    assert r.p.poll() is None


def test_unreachable_target_closes_client(relay):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    dead_port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    r = relay(dead_port, "--delay-ms", 0)
    with r.connect() as s:
        s.settimeout(5)
        try:
            assert s.recv(10) == b""
        except ConnectionResetError:
            pass
    assert r.p.poll() is None


def test_max_conns_queues_extra(echo, relay):
    r = relay(echo, "--delay-ms", 0, "--max-conns", 1)
    a = r.connect()
    a.sendall(b"a")
    assert recv_exact(a, 1) == b"a"
    b = r.connect()  # sits in the backlog until a closes
    b.sendall(b"b")
    b.settimeout(0.3)
    with pytest.raises(socket.timeout):
        b.recv(1)
    a.close()
    b.settimeout(T)
    assert recv_exact(b, 1) == b"b"
    b.close()


def test_sigterm_exits_cleanly(echo, relay):
    r = relay(echo, "--delay-ms", 5)
    s = r.connect()
    s.sendall(b"x" * 1000)
    r.p.send_signal(signal.SIGTERM)
    assert r.p.wait(timeout=3) == 0
    s.close()


def test_sigint_exits_cleanly(echo, relay):
    r = relay(echo, "--delay-ms", 0)
    r.p.send_signal(signal.SIGINT)
    assert r.p.wait(timeout=3) == 0


# --- network namespaces ------------------------------------------------------------

ECHO_SERVER = r"""
import socket, sys
ls = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    c, _ = ls.accept()
    with c:
        while data := c.recv(65536):
            c.sendall(data)
"""

CLIENT = r"""
import socket, sys, time
host, port, n, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
t0 = time.monotonic()
with socket.create_connection((host, port), timeout=timeout) as s:
    s.sendall(b"z" * n)
    got = 0
    while got < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += len(chunk)
print(got, time.monotonic() - t0)
"""


@pytest.fixture
def net():
    try:
        with netns.Netns(n_hosts=2) as n:
            yield n
    except netns.NetnsUnavailable as e:
        pytest.skip(str(e))


def start_echo_in(net, i, port=7000):
    p = net.popen(i, [sys.executable, "-c", ECHO_SERVER, net.addr(i), port],
                  stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stdout], [], [], T)
    assert ready and p.stdout.readline().strip() == "ready"
    return port


def client_in(net, i, host, port, n=100, timeout=2.0):
    return net.run(i, [sys.executable, "-c", CLIENT, host, port, n, timeout], timeout=timeout + 10)


def test_netns_echo_then_cut(net):
    port = start_echo_in(net, 1)
    out = client_in(net, 0, net.addr(1), port)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "100"
    net.cut(1)
    t0 = time.monotonic()
    out = client_in(net, 0, net.addr(1), port, timeout=2.0)
    assert out.returncode != 0  # timed out or unreachable
    assert time.monotonic() - t0 < 10
    net.restore(1)
    out = client_in(net, 0, net.addr(1), port, timeout=5.0)
    assert out.returncode == 0, out.stderr


def test_netns_rate_limit_lower_bound(net):
    port = start_echo_in(net, 1)
    net.set_rate(1, 20)  # 2.5 MB/s each way
    out = client_in(net, 0, net.addr(1), port, n=1 << 20, timeout=20)
    assert out.returncode == 0, out.stderr
    got, elapsed = out.stdout.split()
    assert int(got) == 1 << 20
    assert float(elapsed) >= 0.3, elapsed
    net.set_rate(1, None)


def test_netns_relay_between_hosts(net):
    port = start_echo_in(net, 1)
    r = net.popen(0, [RELAY, "--listen", "127.0.0.1:0", "--target", f"{net.addr(1)}:{port}",
                      "--delay-ms", 10], stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([r.stdout], [], [], T)
    line = r.stdout.readline() if ready else ""
    assert line.startswith("listening on "), line
    relay_port = int(line.strip().rsplit(":", 1)[1])
    out = client_in(net, 0, "127.0.0.1", relay_port, n=10, timeout=5)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[1]) >= 0.020


def test_netns_cleanup_leaves_nothing():
    tag = f"{netns.PREFIX}{os.getpid()}-"
    try:
        with netns.Netns(n_hosts=3) as n:
            assert sum(x.startswith(tag) for x in netns.list_test_namespaces()) == 4
            n.popen(2, ["sleep", "60"])
            raise RuntimeError("boom")  # cleanup must still happen
    except netns.NetnsUnavailable as e:
        pytest.skip(str(e))
    except RuntimeError:
        pass
    assert not [x for x in netns.list_test_namespaces() if x.startswith(tag)]


def test_netns_removes_stale_namespaces_of_dead_runs():
    try:
        netns.check_available()
    except netns.NetnsUnavailable as e:
        pytest.skip(str(e))
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is now free: namespaces named after it are stale
    stale = f"{netns.PREFIX}{dead.pid}-0"
    subprocess.run(["ip", "netns", "add", stale], check=True, timeout=10)
    try:
        with netns.Netns(n_hosts=1):
            assert stale not in netns.list_test_namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True, timeout=10)
