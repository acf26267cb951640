"""A keyed link is sealed: a man in the middle (this test's own relay, on
loopback) that flips a byte, replays, drops or injects a frame after the
handshake ends the connection with an error naming integrity; the primary
prints no wrong token and goes on with the same text once it has re-planned. With --insecure on both sides the frames are
plain; a side with --insecure and one without refuse each other by name."""
import secrets
import socket
import struct
import threading

import pytest

from conftest import run_shoal
from shoal_wire import VERSION

HEADER = struct.Struct("<IHHIIQQ")
FORWARD, FORWARD_RESULT, HEARTBEAT = 14, 15, 21
PROMPT = "Once upon a time"


class TamperRelay:
    """Forwards one primary–worker connection and, on the `nth` frame of
    `msg_type` going `direction` ("up": primary to worker), does `action`."""

    def __init__(self, target_port, action, direction="up", msg_type=FORWARD, nth=3):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target_port, self.action, self.direction, self.msg_type, self.nth = (
            target_port, action, direction, msg_type, nth)
        self.done = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        self.server.settimeout(30)
        try:
            client, _ = self.server.accept()
        except OSError:
            return
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        pumps = [threading.Thread(target=self.pump, args=(client, upstream, "up"), daemon=True),
                 threading.Thread(target=self.pump, args=(upstream, client, "down"), daemon=True)]
        for p in pumps:
            p.start()
        for p in pumps:
            p.join(timeout=60)
        for s in (client, upstream):
            s.close()

    @staticmethod
    def read_exact(sock, n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError
            data += chunk
        return data

    def pump(self, src, dst, direction):
        seen, last = 0, None
        try:
            while True:
                head = self.read_exact(src, HEADER.size)
                n = HEADER.unpack(head)[6]
                frame = head + self.read_exact(src, n)
                msg_type = HEADER.unpack(head)[2]
                if direction == self.direction and msg_type == self.msg_type and not self.done:
                    seen += 1
                    if seen == self.nth:
                        self.done = True
                        frame = self.tamper(frame, last)
                if msg_type != HEARTBEAT:
                    last = head + frame[HEADER.size:]
                dst.sendall(frame)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def tamper(self, frame, previous):
        if self.action == "flip":
            b = bytearray(frame)
            b[HEADER.size + 5] ^= 0x01  # one bit of the payload
            return bytes(b)
        if self.action == "replay":
            return previous + frame  # an earlier frame again, then this one
        if self.action == "drop":
            return b""
        if self.action == "inject":
            fake = HEADER.pack(0x4C4F4853, VERSION, FORWARD, 0, 0, 99, 48) + secrets.token_bytes(48)
            return fake + frame
        raise ValueError(self.action)

    def close(self):
        self.server.close()


@pytest.fixture
def keyed_worker(workers, tmp_path):
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32))
    [w] = workers(1, key_file=key)
    return w, key


def run_through(shoal_bin, test_data, port, key, *extra):
    return run_shoal(shoal_bin, "run", "-m", test_data / "models/stories260K.gguf", "-p", PROMPT, "-n", 24, "--temp", 0,
                     "--ignore-eos", "--rpc", f"127.0.0.1:{port}", "--key-file", key, "--tensor-split", "0,1",
                     "--worker-timeout", 3, *extra, timeout=60)


@pytest.mark.parametrize("action,direction,msg_type", [
    ("flip", "up", FORWARD), ("replay", "up", FORWARD), ("drop", "up", FORWARD), ("inject", "up", FORWARD),
    ("flip", "down", FORWARD_RESULT)])
def test_tampered_frame_ends_the_link_and_the_run_recovers(shoal_bin, test_data, keyed_worker, action, direction,
                                                           msg_type):
    """The frame fails its integrity check, the link ends with that reason,
    and `shoal run` recovers as `shoal serve` does: the same text, no wrong token."""
    w, key = keyed_worker
    clean = run_through(shoal_bin, test_data, w.port, key)
    assert clean.returncode == 0, clean.stderr
    relay = TamperRelay(w.port, action, direction, msg_type)
    try:
        r = run_through(shoal_bin, test_data, relay.port, key)
    finally:
        relay.close()
    assert relay.done, "the relay never saw the frame to tamper with"
    assert r.returncode == 0, r.stderr
    assert "integrity" in r.stderr, r.stderr
    assert r.stdout == clean.stdout  # no wrong token, none lost
    assert w.alive()
    assert run_through(shoal_bin, test_data, w.port, key).stdout == clean.stdout  # and the worker serves on


def test_insecure_links_are_plain_and_must_match(shoal_bin, test_data, workers, tmp_path):
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32))
    [plain] = workers(1, "--insecure", key_file=key)
    r = run_through(shoal_bin, test_data, plain.port, key, "--insecure")
    assert r.returncode == 0, r.stderr
    r = run_through(shoal_bin, test_data, plain.port, key)
    assert r.returncode != 0 and "--insecure" in r.stderr, r.stderr
