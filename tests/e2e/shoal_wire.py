"""A minimal client of Shoal's wire protocol (docs/protocol.md), written
independently in Python so the tests can speak to a worker exactly as a
misbehaving peer would: wrong versions, bad keys, huge frames, garbage."""
import hashlib
import hmac
import json
import os
import socket
import struct

MAGIC = 0x4C4F4853
VERSION = 2
HEADER = struct.Struct("<IHHIIQQ")  # magic, version, type, flags, reserved, request id, payload bytes
HELLO, AUTH, AUTH_OK, ERROR, PING, PONG, STATS, STATS_REPLY = 1, 2, 3, 4, 5, 6, 7, 8
FORWARD = 14
HEARTBEAT = 21


def header(msg_type, payload_len, request_id=0, version=VERSION, magic=MAGIC):
    return HEADER.pack(magic, version, msg_type, 0, 0, request_id, payload_len)


class Peer:
    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)

    def close(self):
        self.sock.close()

    def send(self, msg_type, payload=b"", request_id=0, version=VERSION):
        self.sock.sendall(header(msg_type, len(payload), request_id, version) + payload)

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
            magic, version, msg_type, _, _, request_id, n = HEADER.unpack(self.recv_exact(HEADER.size))
            payload = self.recv_exact(n)
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

    def handshake(self, key=None, role="primary"):
        """HELLO both ways, then the HMAC proofs if the worker asks for them.
        Returns the worker's HELLO frame (or its ERROR frame)."""
        nonce = os.urandom(32).hex()
        self.send_json(HELLO, {"protocol": VERSION, "build": "test", "role": role, "nonce": nonce})
        hello = self.recv_json()
        if hello["type"] != HELLO or not hello["json"].get("auth") or key is None:
            return hello
        worker_nonce = hello["json"]["nonce"]
        proof = proof_of(key, "client", worker_nonce, nonce)
        self.send_json(AUTH, {"proof": proof})
        reply = self.recv_json()
        if reply["type"] == AUTH_OK:
            assert reply["json"]["proof"] == proof_of(key, "worker", nonce, worker_nonce)
        return reply


def proof_of(key, label, first, second):
    return hmac.new(key.encode(), f"{label}|{first}|{second}".encode(), hashlib.sha256).hexdigest()
