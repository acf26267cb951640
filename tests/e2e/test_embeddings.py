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


def test_rerank_scores_are_llama_cpps(shoal_bin, workers, tmp_path):
    """/v1/rerank on a reranker laid out as Qwen3-Reranker's GGUF is (random
    weights, tests/golden/make_rerank_reference.py): each document's score is
    llama.cpp's. Tolerance 1e-5: these random F32 models' logits agree with
    llama.cpp's to 4e-6..1e-5 (tests/golden/README.md), and a softmax of two
    moves by at most a quarter of that. Best first; over two workers the
    same bits."""
    import json
    from conftest import ROOT, random_model
    ref = json.loads((ROOT / "tests" / "golden" / "rerank" / "random-qwen3-reranker.json").read_text())
    model = random_model("random-qwen3-reranker")
    body = {"model": "reranker", "query": ref["query"], "documents": ref["documents"]}
    with Server(shoal_bin, model, tmp_path) as s:
        status, out = s.post_json("/v1/rerank", body)
        assert status == 200, out
        assert out["model"] == "reranker" and out["object"] == "list" and out["usage"]["prompt_tokens"] > 0
        scores = {r["index"]: r["relevance_score"] for r in out["results"]}
        assert sorted(scores) == list(range(len(ref["documents"])))
        for i, expected in enumerate(ref["scores"]):
            assert abs(scores[i] - expected) <= 1e-5, (i, scores[i], expected)
        ranked = [r["relevance_score"] for r in out["results"]]
        assert ranked == sorted(ranked, reverse=True)
        # top_n, the documents returned, and Hugging Face TEI's shape.
        _, top = s.post_json("/rerank", dict(body, top_n=2, return_documents=True))
        assert top["results"] == [dict(r, document={"text": ref["documents"][r["index"]]})
                                  for r in out["results"][:2]]
        _, tei = s.post_json("/reranking", {"query": ref["query"], "texts": ref["documents"], "return_text": True})
        assert [(t["index"], t["score"], t["text"]) for t in tei] == \
            [(r["index"], r["relevance_score"], ref["documents"][r["index"]]) for r in out["results"]]
        # A reranker gives scores, not embeddings; bad input is named.
        status, err = s.post_json("/v1/embeddings", {"input": "x"})
        assert status == 400 and "rank" in err["error"]["message"]
        for bad, param in [({"documents": ["a"]}, "query"), ({"query": "q", "documents": []}, "documents"),
                           ({"query": "q", "documents": ["a", 3]}, "documents"),
                           ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
                           ({"query": "q", "documents": ["a"], "rank_fields": ["x"]}, "rank_fields")]:
            status, err = s.post_json("/v1/rerank", bad)
            assert status == 400 and err["error"]["param"] == param, (bad, err)
    ws = workers(2)
    with Server(shoal_bin, model, tmp_path, "--rpc", ",".join(w.address for w in ws)) as s:
        assert s.post_json("/v1/rerank", body)[1]["results"] == out["results"]


def test_a_ranking_head_this_server_does_not_read_is_refused_by_name(shoal_bin, tmp_path):
    """A BERT-style head (a dense cls.weight before cls.output) is not read:
    /v1/rerank says so, and the model still serves chat."""
    import sys
    from conftest import ROOT, random_model
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from gguf_files import copy_with
    bert_head = copy_with(random_model("random-qwen3-reranker"), tmp_path / "dense-head.gguf",
                          add=lambda w: w.add_tensor("cls.weight", np.zeros((256, 256), dtype=np.float32)))
    with Server(shoal_bin, bert_head, tmp_path) as s:
        status, err = s.post_json("/v1/rerank", {"query": "q", "documents": ["a"]})
        assert status == 400 and err["error"]["code"] == "reranking_not_supported"
        assert "cls.weight" in err["error"]["message"]
        assert s.post_json("/v1/completions", {"prompt": "Once", "max_tokens": 2})[0] == 200
