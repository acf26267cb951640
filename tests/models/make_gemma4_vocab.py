#!/usr/bin/env python3
"""A small vocabulary of Gemma 4's tokenizer kind, and llama.cpp's ids for it.

Usage: tests/models/make_gemma4_vocab.py LLAMA_CPP_MODELS_DIR OUT_DIR

Gemma 4's own vocabulary (llama.cpp's models/ggml-vocab-gemma-4.gguf, 15 MB:
262,144 tokens and 514,906 merges) is too large to keep in the repository,
so this writes one of the same kind, small enough to keep: tokenizer model
"gemma4" (BPE over raw UTF-8 with spaces written as U+2581, bytes as <0xXX>
tokens, only runs of newlines split apart), with the special tokens, the 256
byte tokens, the characters of a training text and 700 merges learnt from it
by plain BPE (the most frequent adjacent pair first, ties to the first
seen). The training text is llama.cpp's own tokenizer inputs for Gemma 4
(models/ggml-vocab-gemma-4.gguf.inp, MIT) with their first half left out, so
that the other half meets merges that do not cover it. The model's
hyperparameters are copied from that file (llama.cpp loads them even for a
vocabulary). Then llama.cpp (llama-cpp-python, LLAMA_CPP_LIB_PATH as in
tests/golden/make_reference.py) tokenizes the same inputs as its
test-tokenizer-0 does (no BOS, special tokens not parsed), which gives the
.out file. Writes OUT_DIR/shoal-vocab-gemma4-bpe.gguf, .inp and .out.
"""
import sys
from collections import Counter
from pathlib import Path

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_files import copy_metadata, finish  # noqa: E402

SEPARATOR = "\n__ggml_vocab_test__\n"
SPACE = "\u2581"
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>"]
MERGES = 700


def train(lines):
    """Plain BPE over the words llama.cpp's gemma4 pre-tokenizer makes (runs of non-newlines)."""
    words = Counter()
    for line in lines:
        for word in line.replace(" ", SPACE).split("\n"):
            if word:
                words[tuple(word)] += 1
    chars = sorted({c for word in words for c in word})
    merges = []
    for _ in range(MERGES):
        pairs = Counter()
        for word, n in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: kv[1])[0]  # first seen among the most frequent
        merges.append(best)
        merged = Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return chars, merges


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    real = source / "ggml-vocab-gemma-4.gguf"
    inputs = (source / "ggml-vocab-gemma-4.gguf.inp").read_text(encoding="utf-8").split(SEPARATOR)
    chars, merges = train(inputs[len(inputs) // 2:])

    tokens, types = list(SPECIALS), [gguf.TokenType.CONTROL] * len(SPECIALS)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    for text in ["\n", "\n\n", "\n\n\n"] + chars + [a + b for a, b in merges]:
        if text not in tokens:
            tokens.append(text)
            types.append(gguf.TokenType.NORMAL)

    path = out_dir / "shoal-vocab-gemma4-bpe.gguf"
    r = gguf.GGUFReader(str(real))
    w = gguf.GGUFWriter(str(path), "gemma4")
    copy_metadata(r, w, skip=tuple(k for k in r.fields if k.startswith("tokenizer.") or k == "general.architecture"))
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    finish(w)

    import llama_cpp  # only now: the vocabulary above needs none of it
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    (out_dir / "shoal-vocab-gemma4-bpe.gguf.inp").write_text(SEPARATOR.join(inputs), encoding="utf-8")
    with open(out_dir / "shoal-vocab-gemma4-bpe.gguf.out", "w") as out:
        for text in inputs:
            ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            out.write("".join(f" {i}" for i in ids) + "\n")
    print(f"{path}: {len(tokens)} tokens, {len(merges)} merges, {len(inputs)} inputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
