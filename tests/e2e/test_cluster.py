"""One model across machines, on loopback: the distributed run gives the
same bits as the local run (text and every step's logits), the weight cache
and models dir spare the transfer, and the wire dtypes cost what they cost."""
import hashlib
import re

import numpy as np
import pytest

from conftest import RANDOM_MODELS, random_model, run_shoal
from shoal_wire import STATS, STATS_REPLY, served_peer

# Longer than one batch at -b 16, so prefill crosses stage boundaries in chunks.
LONG_PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with "
               "her dog Max. One day, Lily and Max went to the park near the river and saw a big red ball.")


def generate(shoal_bin, tmp_path, model, *extra, n=24, name="run"):
    logits = tmp_path / f"{name}.logits"
    r = run_shoal(shoal_bin, "run", "-m", model, "-p", LONG_PROMPT, "-n", n, "--temp", "0", "-t", "2", "-b", "16",
                  "--ignore-eos", "--logits-out", logits, *extra, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout, logits.read_bytes(), r.stderr


def worker_stats(worker):
    peer = served_peer(worker.port)
    peer.send_json(STATS, {}, request_id=2)
    reply = peer.recv_json()
    peer.close()
    assert reply["type"] == STATS_REPLY, reply
    return reply["json"]


@pytest.mark.parametrize("model_name", ["stories260K", "smollm2"] + RANDOM_MODELS)
def test_distributed_runs_are_bit_identical_to_local(shoal_bin, test_data, smollm2, workers, tmp_path, model_name):
    # SmolLM2 has n_embd 576, not a multiple of 512 (llama.cpp's RPC asserts on such rows).
    # The random models: every architecture's block variants (Q/K norms,
    # post-norms, GeGLU, sliding window, experts, rope factors) on a worker.
    model = {"stories260K": test_data / "models/stories260K.gguf", "smollm2": smollm2}.get(model_name) \
        or random_model(model_name)
    text, logits, _ = generate(shoal_bin, tmp_path, model, name="local")
    pool = workers(3)
    # Every topology for the two real models; for the random ones (the
    # architectures' layers on a worker) a star of two and a chain of three.
    topologies = [(1, []), (2, []), (2, ["--chain"]), (3, []), (3, ["--chain"])]
    if model_name not in ("stories260K", "smollm2"):
        topologies = [(2, []), (3, ["--chain"])]
    for n_workers, mode in topologies:
        rpc = ",".join(w.address for w in pool[:n_workers])
        t, l, err = generate(shoal_bin, tmp_path, model, "--rpc", rpc, *mode, name=f"d{n_workers}")
        label = f"{n_workers} workers {' '.join(mode)}"
        assert t == text, label
        assert l == logits, f"{label}: logits differ"
        # Every worker the plan gives layers loads them (a 3-layer model
        # leaves one of 3 workers idle when the primary keeps a layer).
        planned = len(re.findall(r"^127\.0\.0\.1:\d+ +CPU +\d+-\d+", err, re.M))
        assert planned >= min(n_workers, 2), err
        assert len(re.findall(r"layers \d+-\d+ loaded", err)) == planned, err


def test_layers_that_share_a_cache_stay_on_one_machine(shoal_bin, workers, tmp_path):
    """Gemma 4 E2B/E4B: layers 4 and 5 read the caches of layers 2 and 3.
    An even split of the six layers over the primary and a worker would cut
    at 3; the plan keeps 2-5 on the worker instead, each layer's per-layer
    input travels with its row, and the text and logits are the local run's."""
    model = random_model("random-gemma4e")
    text, logits, _ = generate(shoal_bin, tmp_path, model, name="local")
    (w,) = workers(1)
    t, l, err = generate(shoal_bin, tmp_path, model, "--rpc", w.address, "--tensor-split", "1,1", name="split")
    assert re.search(rf"^{re.escape(w.address)} +CPU +2-5 \(4\)", err, re.M), err
    assert (t, l) == (text, logits)


@pytest.mark.parametrize("kv", [("q8_0", "q8_0"), ("f32", "q8_0")])
def test_kv_cache_types_take_effect_and_stay_identical_across_machines(shoal_bin, smollm2, workers, tmp_path, kv):
    # The workers get the types in LOAD_STAGE: their layers store K and V as the primary's do.
    types = ["-ctk", kv[0], "-ctv", kv[1]]
    _, default_logits, _ = generate(shoal_bin, tmp_path, smollm2, name="f16")
    text, logits, _ = generate(shoal_bin, tmp_path, smollm2, *types, name="local")
    assert logits != default_logits, "the KV cache type changed nothing"
    rpc = ",".join(w.address for w in workers(2))
    t, l, _ = generate(shoal_bin, tmp_path, smollm2, "--rpc", rpc, *types, name="d2")
    assert (t, l) == (text, logits)


def test_plan_is_printed_and_tensor_split_is_obeyed(shoal_bin, test_data, workers, tmp_path):
    model = test_data / "models/stories260K.gguf"
    w1, w2 = workers(2)
    _, _, err = generate(shoal_bin, tmp_path, model, "--rpc", f"{w1.address},{w2.address}", "--tensor-split", "0,1,4")
    assert re.search(r"^local\s+CPU\s+none", err, re.M), err
    assert re.search(rf"^{re.escape(w1.address)}\s+CPU\s+0-0 \(1\)", err, re.M), err
    assert re.search(rf"^{re.escape(w2.address)}\s+CPU\s+1-4 \(4\)", err, re.M), err
    r = run_shoal(shoal_bin, "plan", "-m", model, "--rpc", f"{w1.address},{w2.address}")
    assert r.returncode == 0, r.stderr
    assert "predicted decode" in r.stdout and w2.address in r.stdout
    assert worker_stats(w1)["stages_loaded"] == 1  # plan loads nothing


# Pipelining moves micro-batches, not layers: the real models, and the
# architectures that carry state beyond the K/V cache (recurrent, sinks, latent).
@pytest.mark.parametrize("model_name", ["stories260K", "smollm2", "random-qwen35", "random-gpt-oss", "random-deepseek2"])
def test_pipelined_prompts_are_bit_identical_to_local(shoal_bin, test_data, smollm2, workers, tmp_path, model_name):
    """-b 64 -ub 8: each prompt batch crosses the three stages (primary, two
    workers) as a wavefront of micro-batches, every machine busy at once;
    the text and every step's logits are the local run's and the unpipelined
    cluster's, bit for bit."""
    model = {"stories260K": test_data / "models/stories260K.gguf", "smollm2": smollm2}.get(model_name) \
        or random_model(model_name)
    w1, w2 = workers(2)

    def run(name, *extra):
        logits = tmp_path / f"{name}.logits"
        r = run_shoal(shoal_bin, "run", "-m", model, "-p", LONG_PROMPT * 3, "-n", 8, "--temp", "0", "-t", "1",
                      "-b", "64", "--ignore-eos", "--logits-out", logits, *extra, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout, logits.read_bytes()

    cluster = ["--rpc", f"{w1.address},{w2.address}", "--split", "memory"]
    local = run("local")
    assert run("pipelined", *cluster, "-ub", "8") == local
    assert run("whole", *cluster, "-ub", "0") == local


@pytest.mark.parametrize("mode", [[], ["--chain"]])
def test_the_last_worker_returns_only_the_rows_the_head_reads(shoal_bin, test_data, workers, tmp_path, mode):
    """The worker holding the model's last layer finishes and sends back only
    the rows that want logits (FORWARD's rows out): one a step, not every
    prompt row; the worker before it sends every row on. Same bits as local."""
    model = test_data / "models/stories260K.gguf"
    n = 6
    text, logits, _ = generate(shoal_bin, tmp_path, model, n=n, name="local")
    w1, w2 = workers(2)
    before = [worker_stats(w) for w in (w1, w2)]
    t, l, err = generate(shoal_bin, tmp_path, model, "--rpc", f"{w1.address},{w2.address}", "--tensor-split",
                         "0,1,4", *mode, n=n, name="cluster")
    assert (t, l) == (text, logits)
    assert re.search(rf"^{re.escape(w2.address)}\s+CPU\s+1-4 \(4\)", err, re.M), err
    after = [worker_stats(w) for w in (w1, w2)]
    rows_in = [a["forward_rows"] - b["forward_rows"] for a, b in zip(after, before)]
    rows_back = [a["result_rows"] - b["result_rows"] for a, b in zip(after, before)]
    prompt_rows = rows_in[1] - (n - 1)  # the prompt, then a row a decode step
    assert prompt_rows > 16, rows_in  # more than one batch (-b 16)
    assert rows_in[0] == rows_in[1]
    assert rows_back[1] == n, rows_back  # the last prompt row, then each decode step's
    assert rows_back[0] == (0 if mode else rows_in[0]), rows_back  # a chain's first worker answers no one


def test_second_load_sends_no_weight_bytes(shoal_bin, smollm2, workers, tmp_path):
    (w,) = workers(1)
    # By memory: half the layers go to the worker (by speed, probe noise
    # between two processes on one machine decides).
    _, _, err = generate(shoal_bin, tmp_path, smollm2, "--rpc", w.address, "--split", "memory", n=4, name="first")
    first = worker_stats(w)["weight_bytes_received"]
    assert first > 10 << 20, err
    _, _, err = generate(shoal_bin, tmp_path, smollm2, "--rpc", w.address, "--split", "memory", n=4, name="second")
    stats = worker_stats(w)
    assert stats["weight_bytes_received"] == first, "the second load sent weights again"
    assert stats["tensors_from_cache"] > 0
    assert re.search(r"loaded in [\d.]+ s: 0\.0 MiB sent \(0 tensors\), \d+ tensors from its cache", err), err


def test_cache_entries_are_trusted_only_under_their_sha256(shoal_bin, smollm2, workers, tmp_path):
    """An entry's name is the SHA-256 of its bytes: wrong bytes under the right
    name are fetched again, and a file under an XXH3-era (32-digit) name, such
    as a planted collision, is deleted unread. The output stays the local run's."""
    local = generate(shoal_bin, tmp_path, smollm2, n=4, name="local")[:2]
    (w,) = workers(1)
    args = ("--rpc", w.address, "--ts", "0,1")
    generate(shoal_bin, tmp_path, smollm2, *args, n=4, name="fill")
    entries = sorted(w.cache.glob("*.bin"), key=lambda e: e.stat().st_size)
    assert entries and all(len(e.stem) == 64 for e in entries), entries
    assert all(hashlib.sha256(e.read_bytes()).hexdigest() == e.stem for e in entries[-3:])
    victim = entries[-1]
    size = victim.stat().st_size
    victim.write_bytes(bytes(size))  # the right name, the wrong bytes
    planted = w.cache / (victim.stem[:32] + ".bin")
    planted.write_bytes(bytes(size))
    w = workers.restart(w)
    text, logits, err = generate(shoal_bin, tmp_path, smollm2, "--rpc", w.address, "--ts", "0,1", n=4, name="again")
    assert (text, logits) == local
    assert not planted.exists()
    assert worker_stats(w)["weight_bytes_received"] == size
    assert re.search(r"loaded in [\d.]+ s: [\d.]+ MiB sent \(1 tensors\)", err), err
    assert hashlib.sha256(victim.read_bytes()).hexdigest() == victim.stem


def test_worker_reads_its_own_copy_of_the_model(shoal_bin, smollm2, workers, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "renamed-copy.gguf").symlink_to(smollm2)
    (w,) = workers(1, "--models-dir", str(models), "--no-cache")
    text, logits, err = generate(shoal_bin, tmp_path, smollm2, "--rpc", w.address, n=8, name="mdir")
    local_text, local_logits, _ = generate(shoal_bin, tmp_path, smollm2, n=8, name="local")
    assert (text, logits) == (local_text, local_logits)
    assert re.search(r"0\.0 MiB sent \(0 tensors\), 0 tensors from its cache, \d+ from its models dir", err), err
    assert worker_stats(w)["weight_bytes_received"] == 0


@pytest.mark.parametrize("dtype,bound", [("f16", 0.05), ("bf16", 0.5), ("q8_0", 0.5)])
def test_wire_dtype_accuracy_cost(shoal_bin, test_data, workers, tmp_path, dtype, bound):
    """The cost of each lossy wire format, as the largest logit difference
    from the f32 run over 24 greedy steps (teacher forcing is not needed:
    we compare step by step only while the texts agree)."""
    model = test_data / "models/stories260K.gguf"
    (w,) = workers(1)
    ref_text, ref, _ = generate(shoal_bin, tmp_path, model, "--rpc", w.address, name="f32")
    text, got, _ = generate(shoal_bin, tmp_path, model, "--rpc", w.address, "--wire-dtype", dtype, name=dtype)
    a = np.frombuffer(ref, dtype="<f4").reshape(-1, 512)
    b = np.frombuffer(got, dtype="<f4").reshape(-1, 512)
    same = next((i for i in range(len(a)) if a[i].argmax() != b[i].argmax()), len(a))
    diff = float(np.abs(a[: same + 1] - b[: same + 1]).max())
    print(f"wire {dtype}: max |logit diff| {diff:.5f} over {same + 1} steps")
    assert 0 < diff < bound


def test_worker_lends_no_more_than_mem(shoal_bin, smollm2, workers, tmp_path):
    (w,) = workers(1, "--mem", "4M")
    # The planner leaves it out on its own...
    _, _, err = generate(shoal_bin, tmp_path, smollm2, "--rpc", w.address, n=2, name="auto")
    assert re.search(rf"^{re.escape(w.address)}\s+CPU\s+none", err, re.M), err
    # ...and forcing layers onto it is refused with the numbers.
    r = run_shoal(shoal_bin, "run", "-m", smollm2, "-p", "Hi", "-n", "2", "--rpc", w.address, "--tensor-split", "1,1")
    assert r.returncode == 1 and "MiB" in r.stderr and w.address in r.stderr, r.stderr
    assert w.alive()
