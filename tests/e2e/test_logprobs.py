"""logprobs and top_logprobs through the official openai client, checked
against a separate dump of the logits (`shoal run --logits-out`): each
token's log-probability is the log-softmax of the logits the sampler saw,
streamed or not, chat or completion."""
import numpy as np
import pytest

from conftest import run_shoal
from server_fixtures import Server

QUESTION = "Name three colours."
N = 12
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def server(shoal_bin, smollm2, tmp_path_factory):
    s = Server(shoal_bin, smollm2, tmp_path_factory.mktemp("logprobs"))
    yield s
    s.stop()


def log_softmax_steps(path, n_vocab):
    logits = np.fromfile(path, dtype=np.float32).reshape(-1, n_vocab).astype(np.float64)
    m = logits.max(axis=1, keepdims=True)
    return logits - (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))


def test_chat_logprobs_match_the_logits_dump(shoal_bin, smollm2, server, tmp_path):
    dump = tmp_path / "chat.logits"
    r = run_shoal(shoal_bin, "run", "-m", smollm2, "--chat", "-p", QUESTION, "-n", N, "--temp", "0", "-t", "2",
                  "--logits-out", dump)
    assert r.returncode == 0, r.stderr
    client = server.client()
    out = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                         temperature=0, max_tokens=N, logprobs=True, top_logprobs=5)
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens > 0
    assert b"".join(bytes(t.bytes) for t in content).decode() == out.choices[0].message.content
    n_vocab = 49152
    steps = log_softmax_steps(dump, n_vocab)
    for step, t in zip(steps, content):
        top = np.sort(step)[::-1][:5]
        # Greedy: the chosen token is the most likely; its log-probability and
        # the five best are the dump's, to float32 rounding.
        assert t.logprob == pytest.approx(top[0], abs=1e-5)
        assert [a.logprob for a in t.top_logprobs] == pytest.approx(list(top), abs=1e-5)
        assert t.top_logprobs[0].token == t.token

    # Streamed: the same tokens and values, spread over the chunks.
    streamed = []
    for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                                temperature=0, max_tokens=N, logprobs=True, top_logprobs=5,
                                                stream=True):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += chunk.choices[0].logprobs.content
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]

    # Not asked: none.
    plain = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                           temperature=0, max_tokens=N)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs_have_the_legacy_shape(server):
    client = server.client()
    out = client.completions.create(model=MODEL, prompt="Once upon a time", temperature=0, max_tokens=8, logprobs=3)
    lp = out.choices[0].logprobs
    assert "".join(lp.tokens) == out.choices[0].text
    assert len(lp.token_logprobs) == len(lp.tokens) == len(lp.top_logprobs) == len(lp.text_offset) == 8
    assert lp.text_offset == list(np.cumsum([0] + [len(t.encode()) for t in lp.tokens[:-1]]))
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert len(top) <= 3 and max(top.values()) == pytest.approx(chosen, abs=1e-6)
        assert chosen <= 0


def test_bad_logprobs_requests_are_refused_by_name(server):
    status, body = server.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                             "top_logprobs": 3})
    assert status == 400 and body["error"]["param"] == "top_logprobs", body
    status, body = server.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                             "logprobs": True, "top_logprobs": 21})
    assert status == 400 and body["error"]["param"] == "top_logprobs", body
