#!/usr/bin/env python3
"""How `shoal serve` holds up while hostile clients are connected, on
loopback: 200 connections sending their headers a byte at a time, one
sending 200 MB of headers, one sending a 64 MB chunked body. Prints one
table row per binary: how long a normal completion takes meanwhile, how much
the server's memory grew, and how much of each attack the server read.

    python3 bench/hostile_clients.py -m MODEL.gguf BIN [BIN ...]

Bounded: each run lasts about 10 s; every connection and process is closed.
"""
import argparse
import http.client
import json
import re
import socket
import subprocess
import threading
import time


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def completion(port, timeout):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0})
    start = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        return time.monotonic() - start if r.status == 200 else float("nan")
    except OSError:
        return float("inf")
    finally:
        conn.close()


def run(binary, model, args):
    proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "-t", "1", "-c", "1024", "--parallel", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(re.search(r":(\d+)", proc.stdout.readline()).group(1))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # loading
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.2)
        quiet = completion(port, 10)
        before = rss_mib(proc.pid)
        stop = threading.Event()
        read = {}

        def slow(socks):
            for s in socks:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            while not stop.wait(1.0):
                for s in socks:
                    try:
                        s.sendall(b"a")
                    except OSError:
                        pass

        def flood(name, head, piece, total):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            sent = 0
            try:
                s.sendall(head)
                while sent < total and not stop.is_set():
                    s.sendall(piece)
                    sent += len(piece)
            except OSError:
                pass
            read[name] = sent / 2**20
            s.close()

        socks = []
        for _ in range(args.slow):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        threads = [threading.Thread(target=slow, args=(socks,)),
                   threading.Thread(target=flood, args=("headers", b"GET /health HTTP/1.1\r\nX-Big: ", b"b" * 65536,
                                                        200 << 20)),
                   threading.Thread(target=flood, args=("chunked", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                                        b"Transfer-Encoding: chunked\r\n\r\n",
                                                        b"100000\r\n" + b" " * 0x100000 + b"\r\n", 64 << 20))]
        for t in threads:
            t.start()
        time.sleep(1.0)
        during = completion(port, args.timeout)
        grown = rss_mib(proc.pid) - before
        stop.set()
        for t in threads:
            t.join(timeout=30)
        for s in socks:
            s.close()
        return quiet, during, grown, read.get("headers", 0), read.get("chunked", 0), len(socks)
    finally:
        proc.kill()
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--slow", type=int, default=200, help="slow-header connections")
    ap.add_argument("--timeout", type=float, default=30, help="seconds to wait for the normal completion")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    print("| binary | completion alone | completion under attack | RSS growth | 200 MB headers: sent before cut | "
          "64 MB chunked body: sent before cut |")
    print("|---|---:|---:|---:|---:|---:|")
    for b in args.binaries:
        quiet, during, grown, headers, chunked, n = run(b, args.model, args)
        shown = "no answer in %.0f s" % args.timeout if during == float("inf") else f"{during:.2f} s"
        print(f"| {b} | {quiet:.2f} s | {shown} | {grown:.1f} MiB | {headers:.1f} MiB | {chunked:.1f} MiB |")


if __name__ == "__main__":
    main()
