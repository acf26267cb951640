#!/usr/bin/env python3
"""F32 copies of the quantized test models, for tight reference checks.

Usage: tests/models/dequantize_model.py [--dir DIR] [--print-hashes] [NAME ...]

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
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# source name (scripts/fetch-models) -> file name and sha256 of the F32 copy
MODELS = {
    "smollm2-135m": ("SmolLM2-135M-Instruct.F32.gguf", "b89c75c028f12c4213f91818e76d782f99cbd7de4a610a1a420a11ea86c167b9"),
    "gemma3-270m": ("gemma-3-270m.F32.gguf", "ae40adc4d7515482a75ab9edb0e9ab035504a0f8dfdb5ae9f6a0a951aa94c2c4"),
}


def fetch(name, out_dir):
    out = subprocess.run([str(ROOT / "scripts" / "fetch-models"), "--dir", str(out_dir), name], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def dequantize(src, dst):
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch=r.fields["general.architecture"].contents())
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub)
    w.add_key_value("general.file_type", 0, gguf.GGUFValueType.UINT32)  # ALL_F32
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, data.reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
        if name not in MODELS:
            print(f"error: unknown model '{name}' (known: {', '.join(MODELS)})", file=sys.stderr)
            return 2
        src = fetch(name, out_dir)
        file_name, expected = MODELS[name]
        path = out_dir / file_name
        if args.print_hashes or not (path.exists() and sha256(path) == expected):
            tmp = path.with_suffix(".tmp")
            print(f"dequantize_model: {src.name} -> {path.name}", file=sys.stderr)
            dequantize(src, tmp)
            digest = sha256(tmp)
            if args.print_hashes:
                print(f"{name} {digest}", file=sys.stderr)
            elif digest != expected:
                tmp.unlink()
                print(f"error: {name}: dequantized to sha256 {digest}, expected {expected} "
                      "(gguf-py changed; regenerate the references, see tests/golden/README.md)", file=sys.stderr)
                failed = True
                continue
            tmp.replace(path)
        print(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
