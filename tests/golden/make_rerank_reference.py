#!/usr/bin/env python3
"""The reranking reference: llama.cpp's scores for a query and documents on
tests/models/make_random_models.py's random-qwen3-reranker (Qwen3-Reranker's
layout: pooling_type rank, cls.output.weight, a rerank template).

Not run by CI: it needs llama.cpp's llama-embedding, built as
docs/benchmarks.md says (cmake --build BUILD --target llama-embedding):

    tests/golden/make_rerank_reference.py [--llama-build ~/.cache/shoal/llama.cpp-build]

llama-embedding reads each "query<TAB>document" line through the model's
rerank template and prints, unnormalised (--embd-normalize -1), the softmax
over the two labels; the first ("yes") is the score llama-server's /rerank
returns. Writes tests/golden/rerank/random-qwen3-reranker.json.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUERY = "What is the capital of France?"
DOCUMENTS = ["Paris is the capital of France.", "The quick brown fox jumps over the lazy dog.",
             "Berlin is the capital of Germany.", "France", "The Eiffel Tower stands in Paris, the capital city."]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-build", default=str(Path.home() / ".cache" / "shoal" / "llama.cpp-build"))
    args = ap.parse_args()
    model = subprocess.run([str(ROOT / "tests" / "models" / "make_random_models.py"), "random-qwen3-reranker"],
                           check=True, capture_output=True, text=True).stdout.split()[-1]
    lines = "\n".join(f"{QUERY}\t{d}" for d in DOCUMENTS)
    out = subprocess.run([str(Path(args.llama_build) / "bin" / "llama-embedding"), "-m", model, "--pooling", "rank",
                          "--embd-normalize", "-1", "--embd-output-format", "raw", "-t", "2", "-p", lines],
                         check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    if len(rows) != len(DOCUMENTS):
        sys.exit(f"expected {len(DOCUMENTS)} rows of scores, got: {out!r}")
    reference = {"reference": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36 sdist), llama-embedding --pooling rank",
                 "model": Path(model).name, "query": QUERY, "documents": DOCUMENTS,
                 "scores": [float(r[0]) for r in rows]}
    dst = ROOT / "tests" / "golden" / "rerank" / "random-qwen3-reranker.json"
    dst.write_text(json.dumps(reference, indent=1) + "\n")
    print(dst)


if __name__ == "__main__":
    main()
