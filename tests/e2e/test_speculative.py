"""Speculative decoding through `shoal serve` and the `openai` client: the
greedy text with guesses (n-gram lookup or a draft model) is the text
without them, on one machine, over two workers (star and chain), streamed
or not; /metrics counts the guesses; a request may turn them off; a worker
killed in the middle of a speculative stream costs a pause, not a token.

Every wait is bounded; servers and workers are stopped after each test."""
from pathlib import Path

import pytest

import concurrent.futures

from conftest import RANDOM_MODELS, ROOT, random_model, run_shoal
from server_fixtures import Server

PROMPTS = [
    # Quotes itself: n-gram guesses are right for long stretches.
    "The list of colours: red, green, blue, yellow, red, green, blue, yellow, red, green,",
    "Once upon a time, in a small village by the sea, there lived",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
]
N = 48
TIMEOUT = 2  # --worker-timeout (seconds)


def complete(server, prompt, n=N, stream=False, **extra):
    c = server.client()
    body = {"ignore_eos": True, **extra}
    model = server.get_json("/v1/models")[1]["data"][0]["id"]
    if not stream:
        r = c.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0, extra_body=body)
        return r.choices[0].text
    text = ""
    for chunk in c.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0, stream=True,
                                      extra_body=body):
        text += chunk.choices[0].text
    return text


@pytest.fixture
def serve(shoal_bin, tmp_path):
    started = []

    def start(model, *args):
        s = Server(shoal_bin, model, tmp_path, "-c", 512, "--worker-timeout", TIMEOUT, *args, threads=1)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def stream_with_kill(server, prompt, n, victim, at_piece):
    """A greedy stream of n tokens; `victim` (a worker) is killed after
    `at_piece` pieces. Returns the text."""
    model = server.get_json("/v1/models")[1]["data"][0]["id"]
    stream = server.client().completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0, stream=True,
                                                extra_body={"ignore_eos": True})
    text, pieces, killed = "", 0, False
    for chunk in stream:
        text += chunk.choices[0].text
        pieces += 1
        if pieces == at_piece:
            victim.proc.kill()
            killed = True
    assert killed, "the completion ended before the kill"
    return text


def drafted(server):
    m = server.metrics()
    return m["shoal_draft_tokens_total"], m["shoal_draft_accepted_total"]


@pytest.fixture(scope="module")
def plain_texts(shoal_bin, smollm2, tmp_path_factory):
    s = Server(shoal_bin, smollm2, tmp_path_factory.mktemp("plain"), "-c", 512, threads=1)
    try:
        return [complete(s, p) for p in PROMPTS]
    finally:
        s.stop()


@pytest.mark.parametrize("where", ["local", "star", "chain"])
@pytest.mark.parametrize("spec", [["--spec-type", "ngram"], ["-md", "SELF"]])
def test_greedy_text_is_the_plain_text(serve, workers, smollm2, plain_texts, where, spec):
    spec = [smollm2 if a == "SELF" else a for a in spec]  # the model drafting for itself
    cluster = []
    if where != "local":
        cluster = ["--rpc", ",".join(w.address for w in workers(2, "--worker-timeout", TIMEOUT))]
        if where == "chain":
            cluster.append("--chain")
    s = serve(smollm2, *spec, *cluster)
    for prompt, want in zip(PROMPTS, plain_texts):
        assert complete(s, prompt) == want
        assert complete(s, prompt, stream=True) == want
    n, ok = drafted(s)
    assert 0 < ok <= n, (n, ok)
    print(f"\n{where} {' '.join(spec[:1])}: {ok:.0f} of {n:.0f} guesses right")


def test_a_request_turns_speculation_off_and_bad_settings_are_refused(serve, smollm2, plain_texts):
    s = serve(smollm2, "--spec-type", "ngram")
    before = drafted(s)
    assert complete(s, PROMPTS[0], **{"speculative.n_max": 0}) == plain_texts[0]
    assert complete(s, PROMPTS[0], speculative={"n_max": 0}) == plain_texts[0]
    assert drafted(s) == before
    assert complete(s, PROMPTS[0], speculative={"n_max": 2}) == plain_texts[0]
    assert drafted(s)[0] > before[0]
    # n_min above any guess: nothing is checked (llama-server's keys, flat or nested).
    before = drafted(s)
    assert complete(s, PROMPTS[0], **{"speculative.n_min": 64, "speculative.p_min": 0.5}) == plain_texts[0]
    assert complete(s, PROMPTS[0], speculative={"n_min": 64}) == plain_texts[0]
    assert drafted(s) == before
    for body, name in [({"speculative.n_max": 65}, "speculative.n_max"), ({"speculative": {"p_min": 1.5}}, "p_min"),
                       ({"speculative": {"k": 1}}, "speculative.k"), ({"speculative.n_min": -1}, "speculative.n_min"),
                       ({"speculative": 3}, "speculative")]:
        status, err = s.post_json("/v1/completions", {"prompt": "Hi", "max_tokens": 4, **body})
        assert status == 400, (body, err)
        assert name in err["error"]["message"], err
    assert complete(s, PROMPTS[1]) == plain_texts[1]  # and it serves on


def test_a_draft_with_another_vocabulary_or_a_recurrent_target_is_refused(shoal_bin, smollm2, test_data):
    r = run_shoal(shoal_bin, "run", "-m", smollm2, "-md", test_data / "models" / "stories260K.gguf", "-p", "Hi",
                  "-n", 4, timeout=120)
    assert r.returncode == 1 and "vocabulary" in r.stderr, r.stderr
    r = run_shoal(shoal_bin, "run", "-m", smollm2, "--spec-type", "draft", "-p", "Hi", "-n", 4, timeout=120)
    assert r.returncode == 1 and "-md" in r.stderr, r.stderr
    # A file without multi-token-prediction layers has no MTP draft (llama.cpp's name for it too).
    r = run_shoal(shoal_bin, "run", "-m", smollm2, "--spec-type", "draft-mtp", "-p", "Hi", "-n", 4, timeout=120)
    assert r.returncode == 1 and "multi-token-prediction layers" in r.stderr and "has none" in r.stderr, r.stderr


def test_shoal_run_gives_the_same_text_and_reports_acceptance(shoal_bin, smollm2):
    args = ["run", "-m", smollm2, "-p", PROMPTS[0], "-n", N, "--temp", "0", "--ignore-eos", "-t", "1"]
    plain = run_shoal(shoal_bin, *args, timeout=300)
    spec = run_shoal(shoal_bin, *args, "--spec-type", "ngram", timeout=300)
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    assert "guessed tokens accepted" in spec.stderr


def test_killed_worker_mid_speculation_gives_the_same_text(serve, workers, smollm2, plain_texts):
    ws = workers(2, "--worker-timeout", TIMEOUT)
    s = serve(smollm2, "-md", smollm2, "--rpc", ",".join(w.address for w in ws))
    assert stream_with_kill(s, PROMPTS[1], N, ws[1], at_piece=4) == plain_texts[1]
    status, c = s.get_json("/v1/cluster")
    assert c["throughput"]["replans"] >= 1, c
    assert drafted(s)[1] > 0
    assert complete(s, PROMPTS[1]) == plain_texts[1]  # and on without it


def test_parallel_slots_each_draft_and_keep_their_text(serve, smollm2, plain_texts):
    s = serve(smollm2, "-md", smollm2, "--parallel", 4)
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        texts = list(pool.map(lambda i: complete(s, PROMPTS[i % len(PROMPTS)], stream=i % 2 == 1), range(6)))
    assert texts == [plain_texts[i % len(PROMPTS)] for i in range(6)]
    assert drafted(s)[1] > 0


@pytest.mark.parametrize("name", RANDOM_MODELS)
def test_every_architecture_across_two_workers(shoal_bin, workers, name):
    """`shoal run` over two workers (chain) with guesses from n-gram lookup
    and from the model itself gives the text of a plain local run; a model
    with a recurrent state guesses too (its stages take a wrong guess back),
    but is refused as a draft model by name (its state would have to go
    back over many steps)."""
    model = random_model(name)
    ws = workers(2)
    args = ["run", "-m", model, "-p", "Once upon a time, a cat and a dog", "-n", 40, "--temp", "0", "--ignore-eos",
            "-t", "1", "-c", 256]
    plain = run_shoal(shoal_bin, *args, timeout=300)
    assert plain.returncode == 0, plain.stderr
    cluster = ["--rpc", ",".join(w.address for w in ws), "--chain"]
    # A file with its own multi-token-prediction block drafts with it too.
    mtp = [["--spec-type", "mtp"]] if name in MTP_MODELS else []
    for spec in (["--spec-type", "ngram"], ["-md", model], *mtp):
        r = run_shoal(shoal_bin, *args, *cluster, *spec, timeout=300)
        if spec[0] == "-md" and name.startswith(("random-qwen35", "random-qwen3next")):
            assert r.returncode == 1 and "draft model" in r.stderr and "cannot be cut back" in r.stderr, r.stderr
            continue
        assert r.returncode == 0, r.stderr
        assert r.stdout == plain.stdout, spec
        if spec[0] == "-md" or spec == ["--spec-type", "mtp"]:
            assert "guessed tokens accepted" in r.stderr


HYBRID = ["random-qwen35", "random-qwen35moe", "random-qwen3next"]
# The random files that carry a multi-token-prediction block (as the real ones do).
MTP_MODELS = ["random-qwen35", "random-qwen35moe", "random-glm4moe", "random-deepseek2"]


@pytest.mark.parametrize("name", HYBRID)
def test_a_hybrid_model_guesses_with_the_plain_text_everywhere(shoal_bin, workers, name):
    """Qwen3.5 / Qwen3-Next keep a recurrent state that a wrong guess has
    advanced; each stage takes it back within the step (the state before it
    and the step's inputs, run again up to the last right guess). Greedy and
    seeded text with n-gram guesses and with a draft model (random-qwen3:
    the same vocabulary, other weights, so most guesses are wrong) is the
    plain run's, on one machine, over a chain of two workers and over a
    tensor group of two; and with the model's own MTP block where the file
    has one (run on the primary beside the head, from every row's hidden
    state)."""
    model, draft = random_model(name), random_model("random-qwen3")
    ws = workers(2)
    rpc = ",".join(w.address for w in ws)
    for sampling in (["--temp", "0"], ["--temp", "0.8", "--seed", "7"]):
        args = ["run", "-m", model, "-p", PROMPTS[0], "-n", 40, *sampling, "--ignore-eos", "-t", "1", "-c", 256]
        plain = run_shoal(shoal_bin, *args, timeout=300)
        assert plain.returncode == 0, plain.stderr
        for where in ([], ["--rpc", rpc, "--chain"], ["--rpc", rpc, "-sm", "tensor"]):
            mtp = [["--spec-type", "mtp"]] if name in MTP_MODELS else []
            for spec in (["--spec-type", "ngram"], ["-md", draft], *mtp):
                r = run_shoal(shoal_bin, *args, *where, *spec, timeout=300)
                assert r.returncode == 0, r.stderr
                assert r.stdout == plain.stdout, (sampling, where, spec)
                if spec[0] != "--spec-type" or spec[1] == "mtp":  # (n-gram lookup finds nothing to guess in random text at times)
                    assert "guessed tokens accepted" in r.stderr


@pytest.mark.parametrize("spec", ["draft", "mtp"])
def test_a_killed_worker_mid_guess_on_a_hybrid_model_gives_the_same_text(serve, workers, spec):
    """A worker holding DeltaNet layers killed in the middle of a
    speculative stream (a draft model's guesses, or the MTP block's, which
    stays on the primary): the replay rebuilds the state, and the text is
    the plain run's."""
    model = random_model("random-qwen35")
    plain = serve(model)
    expected = complete(plain, PROMPTS[1], n=96)
    plain.stop()
    ws = workers(2, "--worker-timeout", TIMEOUT)
    guess = ["-md", random_model("random-qwen3")] if spec == "draft" else ["--spec-type", "mtp"]
    s = serve(model, *guess, "--rpc", ",".join(w.address for w in ws))
    assert stream_with_kill(s, PROMPTS[1], 96, ws[1], at_piece=6) == expected
    assert s.get_json("/v1/cluster")[1]["throughput"]["replans"] >= 1
    assert drafted(s)[0] > 0


def test_plan_predicts_the_mtp_draft_from_a_stated_acceptance(shoal_bin, smollm2):
    """`shoal plan --spec-type mtp` prices a guess as what the file's MTP
    block and the shared head read on the primary, and predicts the decode
    from the acceptance given (--draft-accept); a file without the block is
    refused by name."""
    cluster = ROOT / "examples" / "clusters" / "two-mac-studio-m3-ultra.toml"
    args = ["plan", "--cluster", cluster, "--spec-type", "mtp", "--draft-max", 1, "--draft-accept", 0.88]
    r = run_shoal(shoal_bin, *args, "-m", random_model("random-qwen35"), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "the model's MTP block" in r.stdout and "88 % of guessed tokens right" in r.stdout, r.stdout
    assert "guessing 1 a step (1.88 tokens a step)" in r.stdout, r.stdout
    r = run_shoal(shoal_bin, *args, "-m", smollm2, timeout=60)
    assert r.returncode == 1 and "no multi-token-prediction layers" in r.stderr, r.stderr
