"""/v1/embeddings through the official openai client: equal texts give equal
vectors (alone or batched with others), different texts different ones,
unit length, base64 the same floats, and a model split across workers
gives the same bits as one machine."""
import base64
import struct

import numpy as np
import pytest

from server_fixtures import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXTS = ["The cat sat on the mat.", "The cat sat on the mat.", "Stock markets fell sharply on Monday.",
         "A kitten rested on the rug."]


def embed(server, inputs, **kw):
    out = server.client().embeddings.create(model=MODEL, input=inputs, **kw)
    assert [d.index for d in out.data] == list(range(len(out.data)))
    return out


def test_embeddings_of_equal_texts_are_equal_and_of_different_texts_differ(shoal_bin, smollm2, tmp_path):
    s = Server(shoal_bin, smollm2, tmp_path, "--parallel", 2)
    try:
        out = embed(s, TEXTS)
        v = np.array([d.embedding for d in out.data], dtype=np.float32)
        assert v.shape == (4, 576)  # SmolLM2-135M's width
        assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
        assert (v[0] == v[1]).all()  # the same bits, batched together
        assert not np.allclose(v[0], v[2], atol=1e-3)
        # The paraphrase lies nearer than the unrelated sentence.
        assert v[0] @ v[3] > v[0] @ v[2]
        assert out.usage.prompt_tokens == out.usage.total_tokens > 0
        # Alone, the same bits as in a batch.
        alone = embed(s, TEXTS[2]).data[0].embedding
        assert alone == out.data[2].embedding
        # base64: little-endian float32, as OpenAI encodes them.
        status, body = s.post_json("/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"})
        assert status == 200, body
        raw = base64.b64decode(body["data"][0]["embedding"])
        assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == out.data[0].embedding
        # Token ids work as input too.
        status, tokens = s.post_json("/tokenize", {"content": TEXTS[0], "add_special": True})
        assert embed(s, [tokens["tokens"]]).data[0].embedding == out.data[0].embedding
        for bad in ({"input": ""}, {"input": []}, {"input": [[10 ** 9]]}, {"input": 5},
                    {"input": "x", "encoding_format": "hex"}, {}):
            status, body = s.post_json("/v1/embeddings", bad)
            assert status == 400 and body["error"]["param"] in ("input", "encoding_format"), (bad, body)
        assert s.get_json("/health")[0] == 200
    finally:
        s.stop()


@pytest.mark.parametrize("split_mode", ["layer", "tensor"])
def test_embeddings_across_workers_are_bit_identical_to_local(shoal_bin, smollm2, workers, tmp_path, split_mode):
    """Over a layer split, and over a tensor group (which runs the output
    head for generation, but hands the rows back to the primary's head for
    embeddings, which pool the normed rows)."""
    s = Server(shoal_bin, smollm2, tmp_path)
    try:
        local = [d.embedding for d in embed(s, TEXTS[:3]).data]
    finally:
        s.stop()
    w1, w2 = workers(2)
    s = Server(shoal_bin, smollm2, tmp_path, "--rpc", f"{w1.address},{w2.address}", "-sm", split_mode)
    try:
        split = [d.embedding for d in embed(s, TEXTS[:3]).data]
    finally:
        s.stop()
    assert split == local
