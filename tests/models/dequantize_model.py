#!/usr/bin/env python3
"""F32 copies of the quantized test models, for tight reference checks.

Usage: tests/models/dequantize_model.py [--dir DIR] [--print-hashes] [NAME ...]

(NAME qwen2.5-coder-0.5b-f16: an F16 copy instead, for the benchmarks.)

On a quantized file two correct engines differ by the way each rounds its
activations (up to ~2 logits on SmolLM2 Q4_1, see tests/golden/README.md);
on the same weights dequantized to F32 llama.cpp and an exact float64
forward agree to ~1e-5, so the F32 copy checks the architecture to ~1e-3.
Each NAME (as scripts/fetch-models names the source) is fetched, every tensor
dequantized with gguf-py and written with the same metadata as
<file stem>.F32.gguf beside the fetched models (--dir, else
$SHOAL_MODELS_DIR, else ~/.cache/shoal/models), then checked against the
sha256 below (a different file would make the committed references
meaningless). Prints each path on stdout.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np

from gguf_files import copy_metadata, finish, make_pinned, writer_like

ROOT = Path(__file__).resolve().parents[2]

# source name (scripts/fetch-models) -> file name and sha256 of the F32 copy
MODELS = {
    "smollm2-135m": ("SmolLM2-135M-Instruct.F32.gguf", "b89c75c028f12c4213f91818e76d782f99cbd7de4a610a1a420a11ea86c167b9"),
    "gemma3-270m": ("gemma-3-270m.F32.gguf", "ae40adc4d7515482a75ab9edb0e9ab035504a0f8dfdb5ae9f6a0a951aa94c2c4"),
}
# Made only when named: F16 copies the benchmarks use (a draft model's
# target, bench/speculative_bench.py). Matrices in F16, vectors in F32, as
# llama.cpp's F16 files are.
F16_MODELS = {
    "qwen2.5-coder-0.5b-f16": ("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct.F16.gguf",
                               "d75ef946738c6db84137d32645dc722a0149c7e4bee89d9e8276eab088d37ea1"),
}


def fetch(name, out_dir):
    out = subprocess.run([str(ROOT / "scripts" / "fetch-models"), "--dir", str(out_dir), name], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def dequantize(src, dst, f16=False):
    r = gguf.GGUFReader(str(src))
    w = writer_like(r, dst)
    copy_metadata(r, w, skip=("general.file_type",))
    w.add_key_value("general.file_type", 1 if f16 else 0, gguf.GGUFValueType.UINT32)  # MOSTLY_F16 / ALL_F32
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if f16 and len(t.shape) > 1:
            data = data.astype(np.float16)
        w.add_tensor(t.name, data.reshape([int(d) for d in reversed(t.shape)]))
    finish(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir")
    ap.add_argument("--print-hashes", action="store_true", help="rewrite the files and print their sha256")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    out_dir = Path(args.dir or os.environ.get("SHOAL_MODELS_DIR") or Path.home() / ".cache" / "shoal" / "models")
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.names or MODELS:
        if name in F16_MODELS:
            source, file_name, expected = F16_MODELS[name]
        elif name in MODELS:
            source, (file_name, expected) = name, MODELS[name]
        else:
            print(f"error: unknown model '{name}' (known: {', '.join([*MODELS, *F16_MODELS])})", file=sys.stderr)
            return 2
        src = fetch(source, out_dir)
        path = out_dir / file_name
        f16 = name in F16_MODELS
        if not make_pinned(name, path, expected, lambda tmp: dequantize(src, tmp, f16), args.print_hashes):
            failed = True
            continue
        print(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
