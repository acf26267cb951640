"""A minimal client of Shoal's wire protocol (docs/protocol.md), written
independently in Python so the tests can speak to a worker exactly as a
misbehaving peer would: wrong versions, bad keys, huge frames, garbage."""
import hashlib
import hmac
import json
import os
import re
import socket
import struct
import time

MAGIC = 0x4C4F4853
# The version this build speaks, read from the one place it is declared so a
# protocol bump cannot leave the tests' peer speaking the old one.
_PROTOCOL_H = os.path.join(os.path.dirname(__file__), "..", "..", "src", "cluster", "wire", "protocol.h")
VERSION = int(re.search(r"kProtocolVersion = (\d+);", open(_PROTOCOL_H).read()).group(1))
TAG = 16  # AES-256-GCM tag on every frame of an encrypted link
HEADER = struct.Struct("<IHHIIQQ")  # magic, version, type, flags, reserved, request id, payload bytes
HELLO, AUTH, AUTH_OK, ERROR, PING, PONG, STATS, STATS_REPLY = 1, 2, 3, 4, 5, 6, 7, 8
FORWARD = 14
HEARTBEAT = 21
LINK_PROBE, LINK_PROBE_ECHO, PROBE, PROBE_RESULT = 22, 23, 24, 25


def header(msg_type, payload_len, request_id=0, version=VERSION, magic=MAGIC):
    return HEADER.pack(magic, version, msg_type, 0, 0, request_id, payload_len)


def transcript_of(client_hello, worker_hello):
    """SHA-256 of both HELLOs as they crossed, each behind its length (hex)."""
    text = b"shoal handshake|%d|%s|%d|%s" % (len(client_hello), client_hello, len(worker_hello), worker_hello)
    return hashlib.sha256(text).hexdigest()


def transcript_mac(key, label, transcript):
    return hmac.new(key.encode(), f"shoal transcript|{label}|{transcript}".encode(), hashlib.sha256).hexdigest()


def session_key(key, direction, transcript):
    return hmac.new(key.encode(), f"shoal frame key|{direction}|{transcript}".encode(), hashlib.sha256).digest()


def iv(seq):
    return b"\0" * 4 + struct.pack("<Q", seq)


class Peer:
    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.seal = self.unseal = None  # AESGCM per direction once the handshake is over
        self.sent = self.received = 0

    def close(self):
        self.sock.close()

    def send(self, msg_type, payload=b"", request_id=0, version=VERSION):
        if self.seal is None:
            self.sock.sendall(header(msg_type, len(payload), request_id, version) + payload)
            return
        head = header(msg_type, len(payload) + TAG, request_id, version)
        sealed = self.seal.encrypt(iv(self.sent), payload, head)
        self.sent += 1
        self.sock.sendall(head + sealed)

    def send_json(self, msg_type, body, request_id=0, version=VERSION):
        self.send(msg_type, json.dumps(body).encode(), request_id, version)

    def recv_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def recv(self, heartbeats=False):
        """The next frame; HEARTBEATs (an idle worker's "still here") are
        skipped unless asked for."""
        while True:
            head = self.recv_exact(HEADER.size)
            magic, version, msg_type, _, _, request_id, n = HEADER.unpack(head)
            payload = self.recv_exact(n)
            if self.unseal is not None and magic == MAGIC and version == VERSION:
                payload = self.unseal.decrypt(iv(self.received), payload, head)  # raises InvalidTag
                self.received += 1
            if msg_type != HEARTBEAT or heartbeats:
                return {"magic": magic, "version": version, "type": msg_type, "id": request_id, "payload": payload}

    def recv_json(self):
        frame = self.recv()
        frame["json"] = json.loads(frame["payload"]) if frame["payload"] else {}
        return frame

    def closed(self):
        """True when the peer has closed the connection: end of stream, or a
        reset (closing with our unread bytes in its buffer sends RST)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def handshake(self, key=None, role="primary", frames=None):
        """HELLO both ways, then the HMAC proofs if the worker asks for them,
        then (with a key, unless frames="plain") sealed frames both ways.
        Returns the worker's HELLO frame (or its ERROR frame)."""
        nonce = os.urandom(32).hex()
        mode = frames or ("aead" if key else "plain")
        client_hello = json.dumps({"protocol": VERSION, "build": "test", "role": role, "nonce": nonce,
                                   "frames": mode}).encode()
        self.send(HELLO, client_hello)
        hello = self.recv_json()
        if hello["type"] != HELLO or not hello["json"].get("auth") or key is None:
            return hello
        worker_nonce = hello["json"]["nonce"]
        transcript = transcript_of(client_hello, hello["payload"])
        proof = proof_of(key, "client", worker_nonce, f"{nonce}|{mode}")
        self.send_json(AUTH, {"proof": proof, "transcript": transcript_mac(key, "client", transcript)})
        reply = self.recv_json()
        if reply["type"] == AUTH_OK:
            assert reply["json"]["proof"] == proof_of(key, "worker", nonce, f"{worker_nonce}|{mode}")
            assert reply["json"]["transcript"] == transcript_mac(key, "worker", transcript)
            if mode == "aead":
                from cryptography.hazmat.primitives.ciphers.aead import AESGCM
                self.seal = AESGCM(session_key(key, "to-worker", transcript))
                self.unseal = AESGCM(session_key(key, "to-client", transcript))
        return reply


def proof_of(key, label, first, second):
    return hmac.new(key.encode(), f"{label}|{first}|{second}".encode(), hashlib.sha256).hexdigest()


def served_peer(port, key=None, within=10.0):
    """A Peer the worker serves as its primary. Right after another primary
    leaves, the worker may not have let it go yet: it refuses the newcomer as
    busy (after the handshake) and closes. Asked again until `within` s pass."""
    deadline = time.monotonic() + within
    while True:
        peer = Peer(port)
        try:
            reply = peer.handshake(key=key)
            if reply["type"] != ERROR:
                peer.send_json(PING, {}, request_id=1)
                reply = peer.recv_json()
                if reply["type"] == PONG:
                    return peer
        except ConnectionError as e:  # refused and closed before the PING got there
            reply = {"payload": str(e).encode()}
        peer.close()
        assert time.monotonic() < deadline, f"the worker on port {port} never served a primary: {reply}"
        time.sleep(0.1)
