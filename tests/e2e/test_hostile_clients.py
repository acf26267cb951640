"""`shoal serve` against clients that misbehave on purpose, on loopback: slow
headers, endless headers, huge chunked bodies, abandoned requests and bad
numbers. A normal client is served meanwhile, and the server's memory stays
put. Every attack is bounded in count and seconds and cleaned up."""
import json
import select
import socket
import threading
import time

import pytest

from server_fixtures import Server

# Runs alone, not beside other tests (deadlines of slow clients, measured): scripts/test runs the
# serial tests after the others, which go two at a time.
pytestmark = pytest.mark.serial

PROMPT = "The capital of France is"


@pytest.fixture
def server(shoal_bin, smollm2, tmp_path):
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 1024, "--parallel", 2, threads=1)
    yield s
    s.stop()


def rss_bytes(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def completion(server, n=8, **extra):
    return server.client(timeout=30).completions.create(model="default", prompt=PROMPT, max_tokens=n, temperature=0,
                                                        **extra)


def test_slow_and_huge_requests_do_not_starve_a_normal_one(server):
    expected = completion(server).choices[0].text
    before = rss_bytes(server.proc.pid)
    stop = threading.Event()
    results = {}

    def slow_headers(socks):
        # 200 connections, each sending a header byte now and then.
        for s in socks:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        while not stop.wait(0.5):
            for s in socks:
                try:
                    s.sendall(b"a")
                except OSError:
                    pass

    def endless_header():
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sent = 0
        try:
            s.sendall(b"GET /health HTTP/1.1\r\nX-Big: ")
            piece = b"b" * 65536
            while sent < 200 << 20 and not stop.is_set():
                s.sendall(piece)
                sent += len(piece)
        except OSError:
            pass
        results["header_bytes_sent"] = sent
        results["header_answer"] = read_status(s)
        s.close()

    def chunked_body():
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sent = 0
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            chunk = b"100000\r\n" + b" " * 0x100000 + b"\r\n"  # 1 MiB a chunk
            while sent < 64 << 20 and not stop.is_set():
                s.sendall(chunk)
                sent += 0x100000
        except OSError:
            pass
        results["body_bytes_sent"] = sent
        results["body_answer"] = read_status(s)
        s.close()

    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(200)]
    attackers = [threading.Thread(target=slow_headers, args=(socks,)), threading.Thread(target=endless_header),
                 threading.Thread(target=chunked_body)]
    try:
        for t in attackers:
            t.start()
        time.sleep(1.0)
        start = time.monotonic()
        got = completion(server).choices[0].text
        took = time.monotonic() - start
        grown = rss_bytes(server.proc.pid) - before
    finally:
        stop.set()
        for t in attackers:
            t.join(timeout=20)
        for s in socks:
            s.close()
    print(f"\nnormal completion during the attack: {took:.2f} s; server RSS grew {grown / 2**20:.1f} MiB; "
          f"header stream cut after {results['header_bytes_sent'] / 2**20:.1f} MiB "
          f"({results['header_answer']}), chunked body after {results['body_bytes_sent'] / 2**20:.1f} MiB "
          f"({results['body_answer']})")
    assert got == expected
    assert took < 2.0
    assert grown < 64 << 20
    assert results["header_bytes_sent"] < 200 << 20 and results["header_answer"] in (431, None)
    assert results["body_bytes_sent"] < 64 << 20 and results["body_answer"] in (413, None)
    assert server.alive()


def read_status(sock):
    """The status code of an answer the server sent before closing, if any."""
    try:
        sock.settimeout(3)
        data = sock.recv(65536)
        return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None
    except (OSError, ValueError, IndexError):
        return None


def test_slow_request_head_gets_a_deadline_not_a_reset_per_byte(shoal_bin, smollm2, tmp_path):
    """A head trickled one byte at a time is cut off when its whole time is
    up (408), however steadily the bytes come."""
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 256, "--http-head-timeout", 2, threads=1)
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        start = time.monotonic()
        status = None
        for b in b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                sock.sendall(bytes([b]))
            except OSError:
                break
            if select.select([sock], [], [], 0.1)[0]:  # the server answered
                break
            if time.monotonic() - start > 6:
                break
        took = time.monotonic() - start
        status = read_status(sock)
        sock.close()
        assert status == 408 and took < 4, (status, took)
    finally:
        s.stop()


def test_abandoned_non_streaming_request_frees_its_slot(server):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 100000, "temperature": 0, "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    def active():
        return server.get_json("/health")[1]["slots"]["active"]

    deadline = time.monotonic() + 10
    while active() != 1:
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.01)
    time.sleep(0.3)  # generating
    tokens_before = server.metrics()["shoal_tokens_out_total"]
    sock.close()
    start = time.monotonic()
    while active() != 0:
        assert time.monotonic() - start < 2, "the slot was not freed"
        time.sleep(0.005)
    freed = time.monotonic() - start
    after = server.metrics()["shoal_tokens_out_total"]
    print(f"\nabandoned request: slot free {1000 * freed:.0f} ms after the client left, "
          f"{int(after - tokens_before)} tokens made meanwhile")
    assert after - tokens_before < 100  # a few decode steps at most, not the 100000 asked for
    assert completion(server, n=2).usage.completion_tokens == 2


@pytest.mark.parametrize("value", ["1e400", "-1e400", "NaN", "Infinity", '"x"', "1e20", "-5", "2.5"])
def test_bad_numbers_are_400_naming_the_parameter(server, value):
    raw = '{"prompt": "hi", "max_tokens": %s}' % value
    status, _, data = server.request("POST", "/v1/completions", raw)
    err = json.loads(data)["error"]
    assert status == 400 and err["param"] == "max_tokens", (status, err)
    assert "json.exception" not in err["message"]
    raw = '{"prompt": "hi", "max_tokens": 2, "temperature": %s}' % value
    status, _, data = server.request("POST", "/v1/completions", raw)
    err = json.loads(data)["error"]
    assert status == 400 and err["param"] == "temperature", (value, status, err)


def test_body_limit_comes_before_the_api_key(shoal_bin, smollm2, tmp_path):
    """A keyed server refuses an oversized chunked body for its size (413)
    without reading it to the end, before the key is even looked at."""
    key = tmp_path / "api.key"
    key.write_text("sk-test-0123456789")
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 256, "--api-key-file", key, threads=1)
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        sent = 0
        try:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
            while sent < 64 << 20:
                sock.sendall(chunk)
                sent += 0x100000
        except OSError:
            pass
        assert sent < 64 << 20 and read_status(sock) in (413, None)
        sock.close()
        assert s.request("GET", "/health")[0] == 200
    finally:
        s.stop()


def test_connection_limits_per_address(shoal_bin, smollm2, tmp_path):
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 256, "--http-max-per-address", 8, threads=1)
    try:
        socks = [socket.create_connection(("127.0.0.1", s.port), timeout=5) for _ in range(8)]
        extra = socket.create_connection(("127.0.0.1", s.port), timeout=5)
        assert read_status(extra) == 429
        extra.close()
        for sock in socks:
            sock.close()
        time.sleep(0.2)
        assert s.request("GET", "/health")[0] == 200
    finally:
        s.stop()
