"""Tensor split (-sm tensor): workers on loopback run every layer together,
each a share of every matmul's rows, trading shares with each other over
their own sealed links. The text is the local run's, token for token, over
2, 3 and 4 members, for every architecture; a member killed, stopped or
refused in the middle of a stream costs a pause, not a token (the group is
re-planned to fewer members, or to a layer split when one is left).

Every wait is bounded; workers and servers are stopped after each test."""
import json
import re
import secrets
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import RANDOM_MODELS, random_model, run_shoal
from shoal_wire import ERROR, FORWARD, Peer
from server_fixtures import STORY_PROMPT as PROMPT, Server, cluster, complete, netns_stream_with_cut, stream_with_fault

N = 64  # server_fixtures' completions
TENSOR_LINK = 26
TIMEOUT = 2  # --worker-timeout (seconds), as serve_cluster's
ROOT = Path(__file__).resolve().parents[2]


def head_mib(model):
    """The output head's matrix (a tied model's embedding) and norm, MiB."""
    import gguf
    tensors = {t.name: t for t in gguf.GGUFReader(model).tensors}
    head = tensors.get("output.weight") or tensors["token_embd.weight"]
    return (int(head.n_bytes) + int(tensors["output_norm.weight"].n_bytes)) / 2**20


def run_args(model, n=N):
    return ["run", "-m", model, "-p", PROMPT, "-n", n, "--temp", "0", "--ignore-eos", "-t", "1", "-c", 256]


@pytest.fixture(scope="module")
def local_text(shoal_bin, smollm2):
    r = run_shoal(shoal_bin, *run_args(smollm2), timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("n_workers", [2, 4])
def test_run_gives_the_local_text(shoal_bin, smollm2, workers, local_text, tmp_path, n_workers):
    key = tmp_path / "key"
    key.write_text(secrets.token_hex(32))
    key.chmod(0o600)
    ws = workers(n_workers, "-v", key_file=key)
    r = run_shoal(shoal_bin, *run_args(smollm2), "--rpc", ",".join(w.address for w in ws), "-sm", "tensor",
                  "--key-file", key, "--logits-out", tmp_path / "group.logits", timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == local_text
    # Every step's logits, the head's included (run by the group), are the local run's bits.
    local = run_shoal(shoal_bin, *run_args(smollm2), "--logits-out", tmp_path / "local.logits", timeout=300)
    assert local.returncode == 0, local.stderr
    assert (tmp_path / "group.logits").read_bytes() == (tmp_path / "local.logits").read_bytes()
    assert f"split: tensor, layers 0-29 on {' + '.join(w.address for w in ws)}" in r.stderr
    # Every member linked to every other one, directly.
    for w in ws:
        assert w.stderr().count("linked") == n_workers - 1, w.stderr()
    # The group runs the output head too (the tied embedding's rows, divided).
    assert f"the output head on the group {' + '.join(w.address for w in ws)}" in r.stderr, r.stderr
    # Each holds about its share of the weights: what was sent to each
    # member, against what one worker holding every layer is sent plus the head.
    sent = [float(m) for m in re.findall(r"loaded in [\d.]+ s: ([\d.]+) MiB sent", r.stderr)]
    alone = run_shoal(shoal_bin, *run_args(smollm2, 1), "--rpc", ws[0].address, "--ts", "0,1", "--key-file", key,
                      timeout=300)
    whole = float(re.search(r"loaded in [\d.]+ s: ([\d.]+) MiB sent", alone.stderr)[1]) + head_mib(smollm2)
    assert len(sent) == n_workers and sum(sent) <= whole * 1.05, (sent, whole)
    assert all(s <= whole / n_workers * 1.3 for s in sent), (sent, whole)


def test_uneven_shares_give_the_local_text(shoal_bin, smollm2, workers, local_text):
    """--tensor-split with -sm tensor gives the members' shares (llama.cpp's
    -sm row reads -ts so): the first worker three times the second's rows,
    the same text, and about three times the weights sent to it."""
    ws = workers(2, "-v")
    r = run_shoal(shoal_bin, *run_args(smollm2), "--rpc", ",".join(w.address for w in ws), "-sm", "tensor",
                  "--ts", "0,3,1", timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == local_text
    assert "a share of every matmul's rows, in proportion 1000:333)" in r.stderr, r.stderr
    assert "share weights 1000:333" in ws[0].stderr() and "share weights 1000:333" in ws[1].stderr()
    sent = [float(m) for m in re.findall(r"loaded in [\d.]+ s: ([\d.]+) MiB sent", r.stderr)]
    assert len(sent) == 2 and 2.0 < sent[0] / sent[1] < 3.0, sent


@pytest.mark.parametrize("n_workers", [3, 4])
def test_a_pipeline_of_groups_gives_the_local_text(shoal_bin, smollm2, workers, local_text, n_workers):
    """--group-size 2: the workers in pairs, each pair half the layers (the
    third worker of three alone, a stage of its own)."""
    ws = workers(n_workers)
    r = run_shoal(shoal_bin, *run_args(smollm2), "--rpc", ",".join(w.address for w in ws), "-sm", "tensor",
                  "--group-size", 2, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == local_text
    assert f"split: tensor, layers 0-14 on {ws[0].address} + {ws[1].address} (2-way" in r.stderr, r.stderr
    second = " + ".join(w.address for w in ws[2:])
    assert f"split: tensor, layers 15-29 on {second}" in r.stderr, r.stderr


@pytest.mark.parametrize("name", RANDOM_MODELS)
def test_every_architecture_over_a_group_of_two(shoal_bin, workers, name):
    model = random_model(name)
    plain = run_shoal(shoal_bin, *run_args(model, 32), timeout=300)
    assert plain.returncode == 0, plain.stderr
    ws = workers(2)
    r = run_shoal(shoal_bin, *run_args(model, 32), "--rpc", ",".join(w.address for w in ws), "--split-mode",
                  "tensor", timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain.stdout


def test_each_member_caches_only_its_kv_heads(serve_cluster, workers):
    """SmolLM2's 9 query heads read 3 KV heads: on two members the first
    computes attention for 3 query heads over KV head 0, the second for 6 over
    KV heads 1-2, and each caches only those, so the two hold one machine's KV
    cache between them (a layer split's, here), not two."""
    ws = workers(2)
    tensor = serve_cluster(ws, "-sm", "tensor")
    expected = complete(tensor)
    kv = {d["address"]: d["kv_bytes"] for d in cluster(tensor)["devices"]}
    tensor.stop()
    layer = serve_cluster(ws, "-sm", "layer")
    assert complete(layer) == expected
    whole = sum(d["kv_bytes"] for d in cluster(layer)["devices"])
    assert kv[ws[1].address] == 2 * kv[ws[0].address] and kv[ws[0].address] + kv[ws[1].address] == whole, (kv, whole)


def test_bad_split_settings_are_refused_by_name(shoal_bin, smollm2, workers):
    ws = workers(2)
    rpc = ",".join(w.address for w in ws)
    r = run_shoal(shoal_bin, *run_args(smollm2, 4), "--rpc", rpc, "-sm", "row", timeout=60)
    assert r.returncode != 0 and "--split-mode must be 'layer', 'tensor' or 'auto', not 'row'" in r.stderr, r.stderr
    r = run_shoal(shoal_bin, *run_args(smollm2, 4), "--rpc", rpc, "-sm", "tensor", "--chain", timeout=60)
    assert r.returncode != 0 and "--chain and --split-mode tensor do not go together" in r.stderr, r.stderr


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_a_lost_member_mid_stream_gives_the_same_text(serve_cluster, workers, local_text, fault):
    """Three members; one is killed or stopped after six pieces of text: the
    stream finishes with the undisturbed text on a group of two."""
    ws = workers(3, "--worker-timeout", TIMEOUT)
    s = serve_cluster(ws, "-sm", "tensor")
    expected = complete(s)
    assert expected in local_text  # the group serves what one machine runs
    victim = ws[1]
    text, fault_at = stream_with_fault(s, lambda: victim.proc.send_signal(getattr(signal, fault)))
    took = time.time() - fault_at
    assert text == expected
    c = cluster(s)
    assert c["throughput"]["replans"] >= 1, c
    print(f"\n{fault} of a tensor group member: the stream finished {took:.2f} s after it")
    assert {m["address"]: m["state"] for m in c["workers"]}[victim.address] == "lost"
    assert complete(s) == expected  # and on, with two members


def test_the_last_two_members_fall_back_to_a_layer_split(serve_cluster, workers, local_text):
    ws = workers(2, "--worker-timeout", TIMEOUT)
    s = serve_cluster(ws, "-sm", "tensor")
    expected = complete(s)
    text, _ = stream_with_fault(s, lambda: ws[0].proc.kill())
    assert text == expected
    assert "-sm tensor: a tensor split needs two machines in a group; the layers are split instead" in s.stderr()
    assert complete(s) == expected


def test_a_cut_link_mid_stream_gives_the_same_text(shoal_bin, smollm2, tmp_path, netns):
    """The primary in one namespace, three members in theirs, sealed links;
    one member's veth goes down in the middle of a stream: its peers' shares
    stop coming and the primary's link goes silent, and the stream finishes
    on a group of two with the undisturbed text."""
    key = tmp_path / "key"
    key.write_text(secrets.token_hex(32))
    key.chmod(0o600)
    net = netns(4)
    for i in (1, 2, 3):
        p = net.popen(i, [shoal_bin, "worker", "--host", net.addr(i), "--port", 50052, "-t", 1, "--key-file", key,
                          "--no-cache", "--worker-timeout", TIMEOUT],
                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert "listening on" in p.stdout.readline()
    log = open(tmp_path / "primary.log", "w+")
    primary = net.popen(0, [shoal_bin, "serve", "-m", smollm2, "--host", net.addr(0), "--port", 8080, "-t", 1, "-c",
                            512, "--key-file", key, "--worker-timeout", TIMEOUT, "-sm", "tensor", "--rpc",
                            ",".join(f"{net.addr(i)}:50052" for i in (1, 2, 3))],
                        stdout=subprocess.PIPE, stderr=log, text=True)
    assert "listening" in primary.stdout.readline()
    base = f"http://{net.addr(0)}:8080"
    client = [sys.executable, ROOT / "tests/tools/stream_client.py", base, PROMPT, N]
    health = ["python3", "-c", f"import urllib.request; urllib.request.urlopen('{base}/health')"]
    deadline = time.monotonic() + 120
    while net.run(0, health, timeout=10).returncode != 0:
        assert time.monotonic() < deadline, "the primary was not ready within 120 s"
        time.sleep(0.2)
    expected, text, cut_at, _ = netns_stream_with_cut(net, client, 2)
    assert text == expected
    log.flush()
    log.seek(0)
    primary_log = log.read()
    assert f"split: tensor, layers 0-29 on {net.addr(1)}:50052 + {net.addr(3)}:50052 (2-way" in primary_log, primary_log
    print(f"\nlink of a tensor group member cut: the stream finished {time.monotonic() - cut_at:.2f} s after it")


def test_a_stranger_cannot_join_or_step_a_group(serve_cluster, workers):
    """With a group serving, a peer claiming a member's link, one naming a
    group that is not there, the primary's link sending TENSOR_LINK, and a
    peer sending FORWARD to a member's stage are each refused by name; the
    group serves on with the same text."""
    ws = workers(2, "-v")
    s = serve_cluster(ws, "-sm", "tensor")
    expected = complete(s)  # the members are linked now
    group = re.search(r"member 0 of tensor group ([0-9a-f]{16})", ws[0].stderr())[1]
    stage = int(re.search(r"stage (\d+): member 0 of tensor group", ws[0].stderr())[1])

    def refused(role, msg_type, body, *words):
        peer = Peer(ws[0].port)
        peer.handshake(key=None, role=role)
        if isinstance(body, bytes):
            peer.send(msg_type, body)
        else:
            peer.send_json(msg_type, body)
        answer = peer.recv_json()
        peer.close()
        assert answer["type"] == ERROR, answer
        for w in words:
            assert w in answer["json"]["message"], answer["json"]["message"]

    refused("peer", TENSOR_LINK, {"group": group, "rank": 1}, "linked already")
    refused("peer", TENSOR_LINK, {"group": "00000000deadbeef", "rank": 1}, "no tensor group 00000000deadbeef")
    refused("peer", TENSOR_LINK, {"group": group, "rank": 0}, "rank 0 of a group of 2")
    # One token of a FORWARD (stage id, 1 token, n_embd 576, f32, no rows out, no route).
    forward = struct.pack("<IIIBBH", stage, 1, 576, 0, 0, 0) + struct.pack("<ii", 0, 0) + bytes(576 * 4)
    refused("peer", FORWARD, forward, f"stage {stage} is a tensor group member's")
    assert complete(s) == expected


@pytest.fixture
def relays(shoal_bin):
    """relays(target, *args): a delay relay in front of `target` (host:port);
    its address. Every relay is stopped after the test."""
    started = []

    def start(target, *args):
        p = subprocess.Popen([Path(shoal_bin).parent / "shoal_delay_relay", "--listen", "127.0.0.1:0", "--target",
                              target, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        started.append(p)
        line = p.stdout.readline()
        assert line.startswith("listening on "), line
        return line.split()[-1]
    yield start
    for p in started:
        p.terminate()
        p.wait(timeout=10)


def test_members_that_cannot_link_are_found_at_load(shoal_bin, smollm2, workers, relays, local_text):
    """Each worker behind a relay that passes one connection, the primary's:
    the members reach the primary but not each other. The group finds out
    when it links at load, its stages are unloaded, and the layers are split
    instead, with the local text."""
    ws = workers(2, "-v", "--worker-timeout", TIMEOUT)
    rpc = [relays(w.address, "--delay-ms", 0, "--max-conns", 1) for w in ws]
    t0 = time.monotonic()
    r = run_shoal(shoal_bin, *run_args(smollm2), "--rpc", ",".join(rpc), "-sm", "tensor", "--worker-timeout",
                  TIMEOUT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == local_text
    assert f"the tensor group {' + '.join(sorted(rpc))} could not link" in r.stderr, r.stderr
    # Whichever member gave up first names the other one.
    assert re.search(r"could not link to tensor group member 127\.0\.0\.1:\d+|"
                     r"tensor group member 127\.0\.0\.1:\d+ did not link to this one within 2\.0 s", r.stderr), r.stderr
    assert "the layer split instead" in r.stderr, r.stderr
    # The stages the group had loaded are gone again.
    for w in ws:
        group_stage = re.search(r"stage (\d+): member \d of tensor group", w.stderr())[1]
        assert f"stage {group_stage}: unloaded" in w.stderr(), w.stderr()
    print(f"\nunlinkable members found and the layers split instead in {time.monotonic() - t0:.1f} s")


def test_auto_takes_the_layer_split_behind_slow_links(shoal_bin, smollm2, workers, relays, local_text):
    """Two workers each behind a 5 ms round trip (the members' links to each
    other too: they link through the same relays): four exchanges a layer
    cost more than a layer split's hops, and -sm auto takes the layers."""
    ws = workers(2)
    rpc = [relays(w.address, "--delay-ms", 2.5) for w in ws]
    r = run_shoal(shoal_bin, *run_args(smollm2), "--rpc", ",".join(rpc), "-sm", "auto", timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == local_text
    layer = float(re.search(r"layer split:\s+tg\s+([\d.]+) ms/token", r.stderr)[1])
    tensor = float(re.search(r"tensor split:\s+tg\s+([\d.]+) ms/token", r.stderr)[1])
    assert tensor > layer, r.stderr
    assert "split mode: layer" in r.stderr and "split: tensor" not in r.stderr, r.stderr
