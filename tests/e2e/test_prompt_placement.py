"""Prompts on one worker, tokens on another (`--prefill-on`): the prompt runs
on worker A, its cache moves layer by layer to worker B (which the plan
gives every layer: --ts 0,0,1), and B generates. The text, greedy and
seeded, is the local run's for a plain KV cache, sliding windows (gemma3),
a recurrent state (qwen35) and latent attention (deepseek2); and when A is
killed mid-prompt or B mid-generation, the run heals to the same text.
Workers are on loopback; every run is bounded and the workers are stopped
after each test."""
import os
import subprocess

import pytest

from conftest import random_model, run_shoal

TIMEOUT = 2  # --worker-timeout (seconds)
PROMPT = ("In the old harbour town the fishermen mended their nets each morning, and the children ran along the "
          "quay shouting the names of the boats as they came in with the tide. ") * 3


def split_args(a, b):
    return ["--rpc", f"{a.address},{b.address}", "--ts", "0,0,1", "--prefill-on", a.address,
            "--worker-timeout", TIMEOUT]


@pytest.mark.parametrize("name", ["random-llama3", "random-gemma3", "random-qwen35", "random-deepseek2"])
def test_a_prompt_on_one_worker_and_tokens_on_another_give_the_local_text(shoal_bin, workers, name):
    model = random_model(name)
    a, b = workers(2, "--worker-timeout", TIMEOUT)
    for sampling in (["--temp", 0], ["--temp", 0.8, "--seed", 7]):
        args = ["run", "-m", model, "-p", PROMPT, "-n", 48, "--ignore-eos", "--no-echo", "-t", 1, "-c", 512,
                *sampling]
        local = run_shoal(shoal_bin, *args, timeout=300)
        assert local.returncode == 0, local.stderr
        split = run_shoal(shoal_bin, *args, *split_args(a, b), timeout=300)
        assert split.returncode == 0, split.stderr
        assert f"prompts on {a.address}: layers 0-" in split.stderr
        assert "1 cache moved to the decode stages" in split.stderr and "; 0 layers kept" in split.stderr, split.stderr
        assert split.stdout == local.stdout, (name, sampling)


def run_bytes(shoal_bin, args):
    """`shoal run`'s stdout as bytes (a random model's text may hold a carriage return, which text mode turns
    into a newline), and its stderr."""
    r = subprocess.run([str(x) for x in [shoal_bin, *args]], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def run_killing(shoal_bin, args, victim, stream, until):
    """`shoal run` with `args`; reads `stream` ("stderr" or "stdout") until it holds `until` (bytes), kills the
    victim worker (-9), and reads on. Returns (stdout, stderr)."""
    p = subprocess.Popen([str(x) for x in [shoal_bin, *args]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = b""
    try:
        pipe = p.stderr if stream == "stderr" else p.stdout
        while until not in got:
            piece = os.read(pipe.fileno(), 1)  # byte by byte: nothing past the mark is taken from communicate()
            assert piece, f"{stream} ended before {until!r}: {got.decode(errors='replace')[-2000:]}"
            got += piece
        victim.proc.kill()
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out, err = (out, got + err) if stream == "stderr" else (got + out, err)
    assert p.returncode == 0, err.decode(errors="replace")
    return out, err.decode(errors="replace")


def test_the_prompt_worker_killed_mid_prompt_gives_the_local_text(shoal_bin, smollm2, workers):
    """A (the prompt's) is killed once its stage is loaded, while the prompt of a few hundred tokens runs on
    it: the prompt runs again on the decode stages, and the text is the local run's."""
    a, b = workers(2, "--worker-timeout", TIMEOUT)
    args = ["run", "-m", smollm2, "-p", PROMPT * 3, "-n", 32, "--temp", 0, "--ignore-eos", "--no-echo", "-t", 1,
            "-c", 1024]
    local = run_bytes(shoal_bin, args)
    out, err = run_killing(shoal_bin, [*args, *split_args(a, b)], a, "stderr",
                           f"prompts on {a.address}: layers 0-29".encode())
    assert "the prompt stages failed" in err, err
    assert out == local


@pytest.mark.parametrize("name", ["smollm2", "random-gemma3", "random-qwen35", "random-deepseek2"])
def test_the_decode_worker_killed_mid_generation_gives_the_local_text(shoal_bin, smollm2, workers, name):
    """B (the tokens') is killed mid-generation: the cluster re-plans without it, the prompt stage is made
    again on A, the sequence goes through it again and its cache (a window's ring, a recurrent state,
    latents) moves to the new decode stages."""
    model = smollm2 if name == "smollm2" else random_model(name)
    a, b = workers(2, "--worker-timeout", TIMEOUT)
    args = ["run", "-m", model, "-p", PROMPT, "-n", 300, "--temp", 0, "--ignore-eos", "--no-echo", "-t", 1,
            "-c", 1024]
    local = run_bytes(shoal_bin, args)
    out, err = run_killing(shoal_bin, [*args, *split_args(a, b)], b, "stdout", b" ")
    assert "re-planning and replaying" in err, err
    assert out == local


def test_serve_shows_both_placements_and_the_cache_it_moved(shoal_bin, smollm2, workers, tmp_path):
    """Under `shoal serve` the prompt runs on A and the tokens on B: the openai client gets the text of a
    server without workers, and /v1/cluster names the prompt's device beside the plan's and counts the
    cache moved."""
    from server_fixtures import Server, cluster, complete
    a, b = workers(2, "--worker-timeout", TIMEOUT)
    alone = Server(shoal_bin, smollm2, tmp_path, "-c", 1024, threads=1)
    try:
        alone.model = "smollm2"
        expected = complete(alone, prompt=PROMPT, n=32)
    finally:
        alone.stop()
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 1024, *split_args(a, b), threads=1)
    try:
        s.model = "smollm2"
        assert complete(s, prompt=PROMPT, n=32) == expected
        c = cluster(s)
        assert [(d["address"], d["layer_begin"], d["layer_end"]) for d in c["prompt_devices"]] == \
            [(a.address, 0, 30)], c
        assert any(d["address"] == b.address and d["layer_end"] == 30 for d in c["devices"]), c
        moves = c["cache_moves"]
        assert moves["sequences"] == 1 and moves["bytes"] > 0, moves
        metrics = s.metrics()
        assert metrics["shoal_prompt_caches_moved_total"] == 1
        assert metrics["shoal_prompt_cache_bytes_moved_total"] == moves["bytes"]
    finally:
        s.stop()


@pytest.mark.serial  # the workers' measured rates decide: alone, not beside other tests
def test_auto_puts_prompts_on_the_worker_that_computes_faster(shoal_bin, smollm2, workers):
    """--prefill-on auto: of a worker with two threads and one with one (which the plan gives every layer),
    the cost model, from each worker's measured rates, puts the prompts on the first; the text is the local
    run's."""
    a = workers(1, "--worker-timeout", TIMEOUT, threads=2)[0]
    b = workers(1, "--worker-timeout", TIMEOUT)[0]
    args = ["run", "-m", smollm2, "-p", PROMPT, "-n", 24, "--temp", 0, "--ignore-eos", "--no-echo", "-t", 1,
            "-c", 2048]
    local = run_bytes(shoal_bin, args)
    r = subprocess.run([str(x) for x in [shoal_bin, *args, "--rpc", f"{a.address},{b.address}", "--ts", "0,0,1",
                                         "--prefill-on", "auto"]], capture_output=True, timeout=300)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err
    assert f"--prefill-on auto predicts" in err and f"prompts on {a.address}: layers 0-29" in err, err
    assert r.stdout == local


def test_a_new_prompt_runs_on_its_worker_while_the_others_generate(shoal_bin, smollm2, workers, tmp_path):
    """`shoal serve --parallel 2`: while one request generates on B, a second request's prompt runs on A in
    the same steps (each step's rows split between the two), its cache then moves to B; both texts are a
    server's without workers, and two caches moved (a step that sent the new prompt to B would move none)."""
    import threading
    from server_fixtures import Server, cluster, complete
    a, b = workers(2, "--worker-timeout", TIMEOUT)
    long_prompt = PROMPT * 2
    alone = Server(shoal_bin, smollm2, tmp_path, "-c", 2048, "--parallel", 2, threads=1)
    try:
        alone.model = "smollm2"
        expected = (complete(alone, n=120), complete(alone, prompt=long_prompt, n=16))
    finally:
        alone.stop()
    s = Server(shoal_bin, smollm2, tmp_path, "-c", 2048, "--parallel", 2, *split_args(a, b), threads=1)
    try:
        s.model = "smollm2"
        stream = s.client().completions.create(model="smollm2", prompt="Once upon a time, in a small village by "
                                               "the sea, there lived", max_tokens=120, temperature=0, stream=True,
                                               extra_body={"ignore_eos": True})
        first, second, started = "", {}, threading.Event()

        def late():
            started.wait(60)
            second["text"] = complete(s, prompt=long_prompt, n=16)

        t = threading.Thread(target=late)
        t.start()
        for i, chunk in enumerate(stream):
            first += chunk.choices[0].text
            if i == 4:
                started.set()
        t.join(120)
        assert (first, second.get("text")) == expected
        moves = cluster(s)["cache_moves"]
        assert moves["sequences"] == 2, moves
    finally:
        s.stop()


def test_a_worker_in_both_placements_keeps_its_layers_rows(shoal_bin, smollm2, workers):
    """A runs the prompts and decodes layers 0-14 too (--ts 0,1,1): those layers' rows are copied on A
    (CACHE_COPY), not sent through the primary; B's layers are moved; the text is the local run's."""
    a, b = workers(2, "--worker-timeout", TIMEOUT)
    args = ["run", "-m", smollm2, "-p", PROMPT, "-n", 24, "--temp", 0, "--ignore-eos", "--no-echo", "-t", 1,
            "-c", 1024]
    local = run_bytes(shoal_bin, args)
    r = subprocess.run([str(x) for x in [shoal_bin, *args, "--rpc", f"{a.address},{b.address}", "--ts", "0,1,1",
                                         "--prefill-on", a.address]], capture_output=True, timeout=300)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err
    assert "15 layers kept on the machine that holds them in both" in err, err
    assert r.stdout == local
