"""Trust on a shared network (docs/protocol.md, "Threat model"): what a
stranger without the key, a man in the middle and a replayed beacon can do
to a worker and a primary, tried as they would try it. Strangers holding
handshakes open cannot lock the primary out; a fake worker that only sends
HEARTBEATs fails `shoal ping` and `shoal serve` within the handshake
deadline; a HELLO rewritten on the way fails the handshake by name; a beacon
replayed from another address is ignored and a keyed one pointing at a fake
costs one deadline; SIGTERM stops a primary promptly in every state; a
worker that is down at start joins later; FORWARD cannot route to a
stranger; an open worker needs two explicit flags.

Everything runs on loopback (127.0.0.1 and, for a second source address,
127.0.0.2); every loop is bounded in count and time."""
import contextlib
import json
import secrets
import select
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import ManagedProcess, run_shoal
from server_fixtures import Server
from shoal_wire import ERROR, FORWARD, HEADER, HEARTBEAT, HELLO, Peer, header

# Runs alone, not beside other tests (deadlines and CPU shares measured under 64-128 strangers):
# scripts/test runs the serial tests after the others, which go two at a time.
pytestmark = pytest.mark.serial

TIMEOUT = 2  # --worker-timeout: the handshake deadline in these tests (seconds)


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "cluster.key"
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return path


def complete(server, prompt, max_tokens, timeout=60):
    """A greedy completion's text (plain HTTP: the official client is tested elsewhere)."""
    status, body = server.post_json("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                                        "temperature": 0}, timeout=timeout)
    assert status == 200, body
    return body["choices"][0]["text"]


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class FakeWorker:
    """A TCP listener that takes connections and answers each with nothing
    but a HEARTBEAT every 0.2 s (or with nothing at all): a keyless stranger
    posing as a worker."""

    def __init__(self, host="127.0.0.1", port=0, heartbeats=True):
        self.heartbeats = heartbeats
        self.sock = socket.create_server((host, port))
        self.port = self.sock.getsockname()[1]
        self.address = f"{host}:{self.port}"
        self.accepted = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        conns = []
        self.sock.settimeout(0.1)
        deadline = time.monotonic() + 120  # bounded even if a test forgets to stop it
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            try:
                c, _ = self.sock.accept()
                conns.append(c)
                self.accepted += 1
            except socket.timeout:
                pass
            for c in list(conns) if self.heartbeats else []:
                try:
                    c.sendall(header(HEARTBEAT, 0))
                except OSError:
                    conns.remove(c)
            time.sleep(0.1)
        for c in conns:
            c.close()

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=5)
        self.sock.close()


def closes_within(sock, seconds):
    """Seconds until the peer closed the connection (reading and dropping
    what it sends), or None if it is still open after `seconds`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        r, _, _ = select.select([sock], [], [], 0.05)
        if r:
            try:
                if not sock.recv(4096):
                    return time.monotonic() - t0
            except OSError:
                return time.monotonic() - t0
    return None


def test_strangers_holding_handshakes_cannot_lock_the_primary_out(shoal_bin, workers, key):
    [w] = workers(1, "--worker-timeout", TIMEOUT, key_file=key)
    stop = threading.Event()
    heartbeat_lives, silent_lives = [], []

    def stranger(heartbeats, lives):
        end = time.monotonic() + 15
        while not stop.is_set() and time.monotonic() < end:
            try:
                # From another address than the primary's, as strangers on a LAN would be.
                s = socket.create_connection(("127.0.0.1", w.port), timeout=5, source_address=("127.0.0.2", 0))
            except OSError:
                time.sleep(0.05)
                continue
            t0 = time.monotonic()
            try:
                if heartbeats:
                    s.sendall(header(HEARTBEAT, 0))  # never HELLO
                lived = closes_within(s, TIMEOUT + 3)
                lives.append(lived if lived is not None else float("inf"))
            finally:
                s.close()

    threads = [threading.Thread(target=stranger, args=(True, heartbeat_lives)) for _ in range(64)]
    threads += [threading.Thread(target=stranger, args=(False, silent_lives)) for _ in range(64)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)  # every handshake slot is taken by now
        # The real primary, while they keep trying: each try is one handshake.
        ok = []
        for _ in range(3):
            r = run_shoal(shoal_bin, "ping", "--rpc", w.address, "--key-file", key, "--worker-timeout", TIMEOUT,
                          timeout=30)
            ok.append(r.returncode == 0 and w.address in r.stdout)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert all(ok), (ok, r.stderr)
    assert heartbeat_lives and silent_lives
    # No stranger's connection outlived the handshake deadline (plus scheduling slack).
    assert max(heartbeat_lives) < TIMEOUT + 1.0, max(heartbeat_lives)
    assert max(silent_lives) < TIMEOUT + 1.0, max(silent_lives)
    assert w.alive()


def test_a_fake_worker_fails_ping_and_serve_within_the_deadline(shoal_bin, smollm2, key, tmp_path):
    fake = FakeWorker()
    try:
        for extra in ([], ["--key-file", key]):
            t0 = time.monotonic()
            r = run_shoal(shoal_bin, "ping", "--rpc", fake.address, "--worker-timeout", TIMEOUT, *extra, timeout=30)
            took = time.monotonic() - t0
            assert r.returncode == 1 and fake.address in r.stderr, r.stderr
            assert "HEARTBEAT before the handshake" in r.stderr, r.stderr
            assert took < TIMEOUT + 3, took
        t0 = time.monotonic()
        r = run_shoal(shoal_bin, "serve", "-m", smollm2, "--port", 0, "-t", 1, "-c", 256, "--rpc", fake.address,
                      "--key-file", key, "--worker-timeout", TIMEOUT, timeout=60)
        assert r.returncode == 1 and fake.address in r.stderr, r.stderr
        assert time.monotonic() - t0 < 30
    finally:
        fake.stop()


class HelloRewriter:
    """A relay between a client and a worker that rewrites one field of the
    first HELLO going one way (the length in the header follows), and
    passes every other byte as it is."""

    def __init__(self, worker_port, direction, field, value):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.worker_port, self.direction, self.field, self.value = worker_port, direction, field, value
        self.rewrote = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def rewrite(self, body):
        j = json.loads(body)
        target = j["device"] if self.field in j.get("device", {}) else j
        target[self.field] = self.value
        self.rewrote = True
        return json.dumps(j).encode()

    def pump(self, src, dst, rewrite_first_hello):
        buf = b""
        done = not rewrite_first_hello
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if done:
                    dst.sendall(data)
                    continue
                buf += data
                if len(buf) < HEADER.size:
                    continue
                magic, version, kind, flags, reserved, rid, n = HEADER.unpack(buf[:HEADER.size])
                if len(buf) < HEADER.size + n:
                    continue
                body, rest = buf[HEADER.size:HEADER.size + n], buf[HEADER.size + n:]
                if kind == HELLO:
                    body = self.rewrite(body)
                dst.sendall(HEADER.pack(magic, version, kind, flags, reserved, rid, len(body)) + body + rest)
                done = True
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def run(self):
        self.listener.settimeout(30)
        try:
            client, _ = self.listener.accept()
        except socket.timeout:
            return
        worker = socket.create_connection(("127.0.0.1", self.worker_port))
        a = threading.Thread(target=self.pump, args=(client, worker, self.direction == "to-worker"), daemon=True)
        b = threading.Thread(target=self.pump, args=(worker, client, self.direction == "to-client"), daemon=True)
        a.start()
        b.start()
        a.join(30)
        b.join(30)


@pytest.mark.parametrize("direction,field,value", [
    ("to-client", "free_memory", 1 << 40),   # claim a terabyte free: the planner would load it up
    ("to-client", "matvec_gbps", 9999.0),    # claim a fast device
    ("to-client", "capabilities", []),       # strip capabilities
    ("to-worker", "role", "peer"),           # the primary's role changed on the way
])
def test_a_rewritten_hello_fails_the_handshake_naming_integrity(shoal_bin, workers, key, direction, field, value):
    [w] = workers(1, key_file=key)
    relay = HelloRewriter(w.port, direction, field, value)
    r = run_shoal(shoal_bin, "ping", "--rpc", f"127.0.0.1:{relay.port}", "--key-file", key, timeout=30)
    assert relay.rewrote
    assert r.returncode == 1 and "integrity" in r.stderr, r.stderr
    assert "1099511627776" not in r.stdout and "9999" not in r.stdout  # never reported as the worker's
    # Untouched, the same worker answers.
    r = run_shoal(shoal_bin, "ping", "--rpc", w.address, "--key-file", key, timeout=30)
    assert r.returncode == 0, r.stderr


def capture_beacon(shoal_bin, key, tmp_path):
    """One real beacon: a worker advertising to a port only this test hears."""
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", port))
        s.settimeout(10)
        w = ManagedProcess()
        w.log = open(tmp_path / "advertiser.log", "w+")
        w.proc = subprocess.Popen([shoal_bin, "worker", "--port", "0", "-t", "1", "--no-cache", "--key-file", str(key),
                                   "--advertise", "--advertise-port", str(port)],
                                  stdout=subprocess.PIPE, stderr=w.log, text=True)
        with w:
            assert "listening on" in w.proc.stdout.readline()
            datagram, source = s.recvfrom(2048)
    assert source[0] == "127.0.0.1"
    return datagram


@contextlib.contextmanager
def sending_beacons(make, to_port, source="127.0.0.2", every=0.1, limit=40):
    """Sends make() from `source` to the primary's beacon port every `every`
    seconds while the block runs (at most `limit` seconds)."""
    stop = threading.Event()

    def send():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((source, 0))
            end = time.monotonic() + limit
            while not stop.is_set() and time.monotonic() < end:
                s.sendto(make(), ("127.0.0.1", to_port))
                time.sleep(every)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        yield
    finally:
        stop.set()
        sender.join()


def auto_primary(shoal_bin, smollm2, tmp_path, key, discover):
    """`shoal serve --rpc auto` listening for beacons on `discover` for 1 s."""
    return Server(shoal_bin, smollm2, tmp_path, "-c", 256, "--key-file", key, "--rpc", "auto", "--discover-port",
                  discover, "--discover-wait", 1, "--worker-timeout", TIMEOUT, threads=1)


def test_a_replayed_beacon_is_ignored(shoal_bin, smollm2, key, tmp_path):
    beacon = capture_beacon(shoal_bin, key, tmp_path)
    body = json.loads(beacon.rsplit(b"\n", 1)[0])
    assert body["host"] == "127.0.0.1"
    # A fake on the second loopback address, at the port the beacon names;
    # the copy is sent from there, the copier's own address.
    fake = FakeWorker("127.0.0.2", body["port"])
    discover = free_port()
    try:
        with sending_beacons(lambda: beacon, discover):
            t0 = time.monotonic()
            with auto_primary(shoal_bin, smollm2, tmp_path, key, discover) as server:
                print(f"\nready {time.monotonic() - t0:.2f} s after start with a replayed beacon on the air")
                assert fake.accepted == 0  # the primary never even connected to it
                status, c = server.get_json("/v1/cluster")
                assert status == 200 and not c["workers"], c["workers"]
                assert complete(server, "Hello", max_tokens=4)
    finally:
        fake.stop()


def keyed_beacon(key_text, host, port, worker_id="feedfacefeedface"):
    import hashlib
    import hmac
    body = json.dumps({"host": host, "id": secrets.token_hex(16), "port": port, "shoal": "worker",
                       "t": int(time.time() * 1000), "worker": worker_id}, separators=(",", ":"))
    tag = hmac.new(key_text.encode(), f"shoal beacon|{body}".encode(), hashlib.sha256).hexdigest()
    return f"{body}\n{tag}".encode()


@pytest.mark.parametrize("heartbeats,why", [(True, "HEARTBEAT before the handshake"), (False, "silent")])
def test_a_keyed_beacon_for_a_fake_costs_one_deadline_then_nothing(shoal_bin, smollm2, key, tmp_path, heartbeats, why):
    fake = FakeWorker("127.0.0.2", heartbeats=heartbeats)
    discover = free_port()
    key_text = key.read_text().strip()
    try:
        with sending_beacons(lambda: keyed_beacon(key_text, "127.0.0.2", fake.port), discover, every=0.2):
            t0 = time.monotonic()
            server = auto_primary(shoal_bin, smollm2, tmp_path, key, discover)
            with server:
                print(f"\nready {time.monotonic() - t0:.2f} s after start with a keyed fake advertised")
                status, c = server.get_json("/v1/cluster")
                [m] = c["workers"]
                assert m["address"] == fake.address and m["state"] == "dropped", m
                assert why in m["last_error"], m
                assert fake.accepted == 1
                assert complete(server, "Hello", max_tokens=4)
                time.sleep(3)  # beacons keep coming: it is not tried again
                assert fake.accepted == 1
                # SIGTERM with discovery running and a dropped candidate.
                t0 = time.monotonic()
                server.proc.send_signal(signal.SIGTERM)
                server.proc.wait(timeout=10)
                assert time.monotonic() - t0 < 2.0
    finally:
        fake.stop()


def test_sigterm_stops_a_primary_in_every_state_within_two_seconds(shoal_bin, smollm2, key, tmp_path):
    def stopped_within(server):
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=10)
        return time.monotonic() - t0

    # Loading: listening for beacons for a long window.
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 256, "--key-file", key, "--rpc", "auto", "--discover-port",
               free_port(), "--discover-wait", 30, threads=1, wait=False)
    with s:
        time.sleep(0.5)
        assert stopped_within(s) < 2.0
    # Serving, with a rejoin attempt stuck in a fake worker's handshake.
    down = free_port()
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 256, "--key-file", key, "--rpc", f"127.0.0.1:{down}",
               "--worker-timeout", 10, threads=1)
    with s:
        fake = FakeWorker("127.0.0.1", down)
        try:
            deadline = time.monotonic() + 10
            while fake.accepted == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fake.accepted >= 1  # the rejoin thread is inside its handshake now
            assert stopped_within(s) < 2.0
        finally:
            fake.stop()
    # Generating: a long completion in flight.
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 512, threads=1)
    with s:
        def generate():
            try:
                complete(s, "Once upon a time", max_tokens=400, timeout=60)
            except Exception:  # the server goes away mid-request: that is the point
                pass

        t = threading.Thread(target=generate, daemon=True)
        t.start()
        time.sleep(1.0)
        assert stopped_within(s) < 2.0


def test_a_worker_down_at_start_joins_when_it_comes(shoal_bin, smollm2, workers, key, tmp_path):
    [a] = workers(1, "--worker-timeout", TIMEOUT, key_file=key)
    down = free_port()
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 256, "--key-file", key, "--rpc", f"{a.address},127.0.0.1:{down}",
               "--worker-timeout", TIMEOUT, threads=1)
    with s:
        states = lambda: {m["address"]: m["state"] for m in s.get_json("/v1/cluster")[1]["workers"]}
        assert states() == {a.address: "active", f"127.0.0.1:{down}": "unreachable"}, states()
        before = complete(s, "The capital of France is", max_tokens=12)
        [b] = workers(1, "--worker-timeout", TIMEOUT, key_file=key, port=down)
        deadline = time.monotonic() + 30
        while states().get(b.address) != "active":
            assert time.monotonic() < deadline, states()
            time.sleep(0.1)
        assert complete(s, "The capital of France is", max_tokens=12) == before


def encode_forward(stage_id, n_embd, route_address, route_stage):
    positions, seq_ids = struct.pack("<i", 0), struct.pack("<i", 0)
    addr = route_address.encode()
    route = struct.pack("<IH", route_stage, len(addr)) + addr
    head = struct.pack("<IIIBBH", stage_id, 1, n_embd, 0, 0, 1)
    return head + positions + seq_ids + route + struct.pack("<f", 0.0) * n_embd


def test_forward_cannot_route_to_an_address_outside_the_cluster(shoal_bin, smollm2, workers, key, tmp_path):
    a, b = workers(2, key_file=key)
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 256, "--key-file", key, "--rpc", f"{a.address},{b.address}",
               "--chain", "--tensor-split", "1,1,1", threads=1)
    with s:
        assert complete(s, "Hello", max_tokens=4)  # the chain works between members
        outsider = socket.create_server(("127.0.0.1", 0))
        outsider.settimeout(3)
        peer = Peer(a.port)
        try:
            reply = peer.handshake(key=key.read_text().strip(), role="peer")
            assert reply["type"] != ERROR, reply
            peer.send(FORWARD, encode_forward(1, 576, f"127.0.0.1:{outsider.getsockname()[1]}", 1), request_id=99)
            with pytest.raises(socket.timeout):
                outsider.accept()  # the worker never connected to it
        finally:
            peer.close()
            outsider.close()
        assert "not a member of this worker's cluster" in a.stderr(), a.stderr()
        assert complete(s, "Hello", max_tokens=4)


def test_an_open_worker_needs_two_explicit_flags(shoal_bin, tmp_path):
    r = run_shoal(shoal_bin, "worker", "--host", "0.0.0.0", "--port", 0, "--insecure", "--no-cache", timeout=30)
    assert r.returncode == 1 and "--trusted-network" in r.stderr, r.stderr
    r = run_shoal(shoal_bin, "worker", "--host", "0.0.0.0", "--port", 0, "--no-cache", timeout=30)
    assert r.returncode == 1 and "without a cluster key" in r.stderr, r.stderr
    # With both, it starts (and is stopped at once).
    p = subprocess.Popen([shoal_bin, "worker", "--host", "0.0.0.0", "--port", "0", "--insecure", "--trusted-network",
                          "--no-cache"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "listening on" in p.stdout.readline()
    finally:
        p.terminate()
        p.wait(timeout=10)
        p.stdout.close()


def test_health_answers_at_once_with_64_generation_requests_open(shoal_bin, smollm2, tmp_path):
    import http.client
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 1024, "--parallel", 4, threads=1)
    with s:
        conns = []
        try:
            body = json.dumps({"prompt": "Once upon a time", "max_tokens": 500, "temperature": 0, "stream": True,
                               "ignore_eos": True})
            for _ in range(64):  # each holds a handler (streaming or queued), more than the handler pool
                c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
                c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
                conns.append(c)
            time.sleep(2.0)  # every handler is busy by now
            status, h = s.get_json("/health")
            assert h["slots"]["active"] == 4 and h["slots"]["queued"] > 0, h
            waits = {}
            for path in ("/health", "/metrics", "/v1/cluster"):
                took = []
                for _ in range(5):
                    t0 = time.monotonic()
                    status, _, _ = s.request("GET", path, timeout=30)
                    took.append(time.monotonic() - t0)
                    assert status == 200, path
                waits[path] = sorted(took)
            print("\nanswer times with 64 generations open (s):", {p: [round(t, 4) for t in w] for p, w in waits.items()})
            for path, took in waits.items():
                assert took[2] < 0.1 and took[-1] < 1.0, (path, took)  # median under 100 ms
        finally:
            for c in conns:
                c.close()
