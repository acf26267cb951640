"""The Vulkan backend as a user meets it, on this machine's lavapipe (Mesa's
Vulkan device on the CPU: a correctness device, not a speed one): `shoal
devices`, `--device vulkan` and `-ngl` on run and bench, and a cluster that
mixes a Vulkan worker with CPU machines behind `shoal serve`, talked to with
the official openai client.

Across backends the bits differ; the runs are held to the cross-backend
tolerance of tests/unit/vulkan_model_test.cpp (1e-3 of the largest |logit|
on f32 weights, where both compute in f32 in another order), and greedy text
to equality where the references have clear margins (stories260K's golden
prompts: every step's top-2 gap is far above that tolerance)."""
import re

import numpy as np
import pytest

from conftest import random_model, run_shoal
from server_fixtures import Server

PROMPT = "Once upon a time"
N = 40


def stories(test_data):
    return test_data / "models/stories260K.gguf"


def run(shoal_bin, tmp_path, model, *extra, name="run"):
    logits = tmp_path / f"{name}.logits"
    r = run_shoal(shoal_bin, "run", "-m", model, "-p", PROMPT, "-n", N, "--temp", "0", "-t", "2", "--ignore-eos",
                  "--no-echo", "--logits-out", logits, *extra, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout, np.fromfile(logits, dtype=np.float32), r.stderr


def assert_near(a, b):
    assert a.shape == b.shape
    worst = float(np.max(np.abs(a - b)))
    assert worst <= 1e-3 * float(np.max(np.abs(b))), worst
    return worst


def test_devices_lists_the_cpu_and_lavapipe(shoal_bin):
    r = run_shoal(shoal_bin, "devices")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^cpu +.+threads, [\d.]+ GiB memory", r.stdout, re.M), r.stdout
    assert re.search(r"^vulkan:0 +llvmpipe .*GiB memory", r.stdout, re.M), r.stdout


def test_run_on_vulkan_and_with_ngl_agrees_with_the_cpu(shoal_bin, test_data, tmp_path):
    text, logits, _ = run(shoal_bin, tmp_path, stories(test_data), name="cpu")
    gpu_text, gpu_logits, err = run(shoal_bin, tmp_path, stories(test_data), "--device", "vulkan", "-v", name="gpu")
    assert "stage: llvmpipe" in err, err
    assert gpu_text == text
    assert_near(gpu_logits, logits)
    assert not np.array_equal(gpu_logits, logits), "the same bits: was the GPU used at all?"
    split_text, split_logits, err = run(shoal_bin, tmp_path, stories(test_data), "--device", "vulkan", "-ngl", "2", "-v",
                                        name="split")
    assert re.search(r"stage: CPU layers 0-2", err) and re.search(r"stage: llvmpipe.* layers 3-4", err), err
    assert split_text == text
    assert_near(split_logits, logits)


def test_bench_on_vulkan_names_the_device(shoal_bin, test_data):
    r = run_shoal(shoal_bin, "bench", "-m", stories(test_data), "--device", "vulkan", "-p", "16", "-n", "8", "-r", "1")
    assert r.returncode == 0, r.stderr
    assert "Vulkan device: llvmpipe" in r.stdout
    assert re.search(r"\| Vulkan \| 2 \| pp16 \| [\d.]+", r.stdout), r.stdout
    assert re.search(r"\| Vulkan \| 2 \| tg8 \| [\d.]+", r.stdout), r.stdout


def test_bench_verbose_models_the_gpu_from_bytes_and_flops(shoal_bin, test_data):
    """-v: per prompt batch and per decode token, each kernel class's bytes
    and FLOPs, and what they allow on an H100 and an RTX 4090. A decode
    token reads every weight once (stories260K's 0.29 M F32 parameters:
    about the file's size) and a 16-token prompt batch computes more than 8
    tokens' worth."""
    r = run_shoal(shoal_bin, "bench", "-m", stories(test_data), "--device", "vulkan", "-p", "16", "-n", "4", "-r", "1",
                  "-v")
    assert r.returncode == 0, r.stderr
    blocks = r.stdout.split("vulkan per ")[1:]
    assert [b.split(":")[0] for b in blocks] == ["batch", "token"], r.stdout

    def table(block):
        rows = {}
        for line in block.splitlines()[2:]:
            m = re.match(r"  ([a-z -]+?)\s{2,}([\d.e+-]*)\s+([\d.e+-]+)\s+([\d.e+-]+)\s+([\d.e+-]+)$", line)
            if m:
                rows[m.group(1)] = [float(x) if x else 0.0 for x in m.groups()[1:]]
        return rows
    batch, token = table(blocks[0]), table(blocks[1])
    assert "matmul" in batch and "matvec" in token and "attention" in token, r.stdout
    weights = (test_data / "models/stories260K.gguf").stat().st_size
    # A token reads the weights once (the file less its tokenizer) and little else.
    assert 0.5 * weights / 1e6 < token["total"][1] < 1.5 * weights / 1e6, (token, weights)
    assert batch["total"][3] > 8 * token["total"][3]
    assert len(re.findall(r"at 80 % of an (H100|RTX 4090).*tok/s \((memory|compute)-bound\)", r.stdout)) == 4


def test_a_missing_device_falls_back_to_the_cpu_in_one_line(shoal_bin, test_data, tmp_path):
    text, logits, _ = run(shoal_bin, tmp_path, stories(test_data), name="cpu")
    t, l, err = run(shoal_bin, tmp_path, stories(test_data), "--device", "vulkan:7", name="missing")
    assert len(re.findall(r"no Vulkan device 7", err)) == 1, err
    assert (t, l.tobytes()) == (text, logits.tobytes())
    r = run_shoal(shoal_bin, "run", "-m", stories(test_data), "-p", "x", "--device", "cuda")
    assert r.returncode != 0 and "expected cpu, vulkan or vulkan:N" in r.stderr


def test_mixed_cluster_through_serve(shoal_bin, test_data, workers, tmp_path):
    """A CPU primary, a worker lending its GPU and a CPU worker."""
    local_text, local_logits, _ = run(shoal_bin, tmp_path, stories(test_data), name="local")
    gpu_worker, = workers(1, "--device", "vulkan")
    cpu_worker, = workers(1)
    rpc = f"{gpu_worker.address},{cpu_worker.address}"
    split = ["--rpc", rpc, "--tensor-split", "1,2,2"]  # stories260K's 5 layers: 0 | 1-2 | 3-4

    text, logits, err = run(shoal_bin, tmp_path, stories(test_data), *split, name="mixed")
    assert re.search(rf"^{re.escape(gpu_worker.address)}\s+llvmpipe.*\s1-2 \(2\)", err, re.M), err
    assert len(re.findall("no longer bit-identical", err)) == 1, err
    assert text == local_text
    assert_near(logits, local_logits)

    with Server(shoal_bin, stories(test_data), tmp_path, *split) as s:
        client = s.client()
        c = client.completions.create(model="stories260K", prompt=PROMPT, temperature=0, max_tokens=N)
        assert c.choices[0].text + "\n" == local_text
        status, cluster = s.get_json("/v1/cluster")
        assert status == 200
        gpu = [d for d in cluster["devices"] if d["address"] == gpu_worker.address]
        assert gpu and gpu[0]["backend"].startswith("llvmpipe") and (gpu[0]["layer_begin"], gpu[0]["layer_end"]) == (1, 3)
        assert "no longer bit-identical" in s.stderr()


@pytest.mark.parametrize("name", ["random-qwen35", "random-qwen3next", "random-gpt-oss"])
def test_this_years_models_on_a_vulkan_worker(shoal_bin, workers, tmp_path, name):
    """Qwen3.5's and Qwen3-Next's Gated DeltaNet (its state on the device)
    and gpt-oss's sinks and clamped SwiGLU on a worker lending its GPU,
    beside a CPU worker: the local text, logits within the cross-backend
    tolerance, and for the hybrid models the same with guesses from a draft
    model (the device's state taken back within a step)."""
    model = random_model(name)
    local_text, local_logits, _ = run(shoal_bin, tmp_path, model, name="local")
    gpu_worker, = workers(1, "--device", "vulkan")
    cpu_worker, = workers(1)
    split = ["--rpc", f"{gpu_worker.address},{cpu_worker.address}", "--tensor-split", "0,3,1"]
    text, logits, err = run(shoal_bin, tmp_path, model, *split, name="mixed")
    assert re.search(rf"^{re.escape(gpu_worker.address)}\s+llvmpipe.*\s0-2 \(3\)", err, re.M), err
    assert text == local_text
    assert_near(logits, local_logits)
    if name != "random-gpt-oss":
        guessed, _, err = run(shoal_bin, tmp_path, model, *split, "-md", random_model("random-qwen3"), name="guessed")
        assert "guessed tokens accepted" in err
        assert guessed == local_text
