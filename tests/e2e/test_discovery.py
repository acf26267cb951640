"""Workers found by key: in network namespaces on one bridge, two workers
advertise with the cluster key and a third with another key; `shoal serve
--rpc auto` uses the first two only, and a fourth that starts later joins at
the next re-plan without changing the answers. Also on loopback: `shoal ping
--discover` lists exactly the workers of its key. Bounded; namespaces and
processes are removed at the end."""
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_shoal

ROOT = Path(__file__).resolve().parents[2]

PROMPT = "Once upon a time, in a small village by the sea, there lived"


def test_ping_discover_lists_the_workers_of_its_key(shoal_bin, workers, tmp_path):
    ours, theirs = tmp_path / "ours.key", tmp_path / "theirs.key"
    ours.write_text(secrets.token_hex(32))
    theirs.write_text(secrets.token_hex(32))
    [a] = workers(1, "--advertise", key_file=ours)
    [b] = workers(1, "--advertise", key_file=theirs)
    r = run_shoal(shoal_bin, "ping", "--discover", "--key-file", ours, "--discover-wait", 2, timeout=30)
    assert r.returncode == 0, r.stderr
    assert a.address in r.stdout and b.address not in r.stdout, r.stdout
    assert "1 worker(s) advertising" in r.stdout
    r = run_shoal(shoal_bin, "worker", "--port", 0, "--advertise", timeout=30)
    assert r.returncode == 1 and "--advertise needs the cluster key" in r.stderr


def test_rpc_auto_finds_key_holders_and_takes_a_late_one_at_the_next_replan(shoal_bin, smollm2, tmp_path, netns):
    key, other = tmp_path / "cluster.key", tmp_path / "other.key"
    key.write_text(secrets.token_hex(32))
    other.write_text(secrets.token_hex(32))
    net = netns(5)
    try:
        def worker(i, k):
            p = net.popen(i, [shoal_bin, "worker", "--host", net.addr(i), "--port", 50052, "-t", 1, "--key-file", k,
                              "--no-cache", "--advertise", "--worker-timeout", 2],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert "listening on" in p.stdout.readline()
            return f"{net.addr(i)}:50052"

        a, b, stranger = worker(1, key), worker(2, key), worker(3, other)
        log = open(tmp_path / "primary.log", "w+")
        primary = net.popen(0, [shoal_bin, "serve", "-m", smollm2, "--host", net.addr(0), "--port", 8080, "-t", 1,
                                "-c", 512, "--key-file", key, "--rpc", "auto", "--discover-wait", 2,
                                "--worker-timeout", 2], stdout=subprocess.PIPE, stderr=log, text=True)
        assert "listening" in primary.stdout.readline()
        base = f"http://{net.addr(0)}:8080"

        def get(path):
            r = net.run(0, ["python3", "-c", f"import urllib.request,sys; "
                                             f"sys.stdout.write(urllib.request.urlopen('{base}{path}').read().decode())"],
                        timeout=10)
            return json.loads(r.stdout) if r.returncode == 0 else None

        def members():
            c = get("/v1/cluster")
            return {m["address"]: m["state"] for m in (c or {}).get("workers") or []}

        deadline = time.monotonic() + 60
        while get("/health") is None or get("/health").get("status") != "ok":
            assert time.monotonic() < deadline, "the primary never became ready"
            time.sleep(0.2)
        assert members() == {a: "active", b: "active"}, members()  # the other key's worker is not used
        assert stranger not in json.dumps(get("/v1/cluster"))

        client = [sys.executable, ROOT / "tests/tools/stream_client.py", base, PROMPT, 32]
        before = "".join(json.loads(line).get("text", "") for line in net.run(0, client, timeout=120).stdout.splitlines())
        assert before

        late = worker(4, key)
        deadline = time.monotonic() + 20
        while members().get(late) != "active":
            assert time.monotonic() < deadline, f"the late worker was not taken in: {members()}"
            time.sleep(0.2)
        after = "".join(json.loads(line).get("text", "") for line in net.run(0, client, timeout=120).stdout.splitlines())
        assert after == before  # a different split, the same bits
        devices = {d["address"] for d in get("/v1/cluster")["devices"]}
        assert late in devices
        print(f"\n--rpc auto: {sorted(members())} in use; {stranger} (other key) ignored")
    finally:
        net.close()


def test_a_worker_on_every_address_is_one_candidate(shoal_bin, tmp_path, netns):
    """A worker listening on 0.0.0.0 beacons from loopback and from its LAN
    address; a primary on the same host hears both and lists it once."""
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32))
    net = netns(2)
    try:
        w = net.popen(1, [shoal_bin, "worker", "--host", "0.0.0.0", "--port", 50052, "-t", 1, "--key-file", key,
                          "--no-cache", "--advertise"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert "listening on" in w.stdout.readline()
        r = net.run(1, [shoal_bin, "ping", "--discover", "--key-file", key, "--discover-wait", 2], timeout=30)
        assert r.returncode == 0, r.stderr
        assert "1 worker(s) advertising" in r.stdout, r.stdout
        print(f"\n{r.stdout.strip()}")
    finally:
        net.close()
