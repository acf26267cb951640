"""Broken GGUF input gives a one-line error and a non-zero exit — never a
crash, never a hang. scripts/test also runs this file against the
ASan/UBSan build (SHOAL_BIN=build-asan/shoal)."""
import random

import pytest

from conftest import run_shoal

STORIES = "models/stories260K.gguf"


def corrupt_copies(test_data, tmp_path):
    data = (test_data / STORIES).read_bytes()
    rng = random.Random(7)
    cases = {
        "empty": b"",
        "wrong-magic": b"GGUX" + data[4:],
        "version-1": data[:4] + (1).to_bytes(4, "little") + data[8:],
        "truncated-header": data[:100],
        "truncated-metadata": data[:5000],
        "truncated-data": data[: len(data) // 2],
        "absurd-tensor-count": data[:8] + (2**62).to_bytes(8, "little") + data[16:],
        "absurd-kv-count": data[:16] + (2**60).to_bytes(8, "little") + data[24:],
    }
    for i in range(12):
        flipped = bytearray(data)
        for _ in range(1 + i % 5):
            at = rng.randrange(0, 12000)
            flipped[at] ^= 1 << rng.randrange(8)
        cases[f"bit-flip-{i}"] = bytes(flipped)
    paths = {}
    for name, blob in cases.items():
        p = tmp_path / f"{name}.gguf"
        p.write_bytes(blob)
        paths[name] = p
    return paths


@pytest.mark.parametrize("command", ["inspect", "run"])
def test_broken_gguf_gives_one_line_error(shoal_bin, test_data, tmp_path, command):
    must_fail = {"empty", "wrong-magic", "version-1", "truncated-header", "truncated-metadata",
                 "truncated-data", "absurd-tensor-count", "absurd-kv-count"}
    for name, path in corrupt_copies(test_data, tmp_path).items():
        args = [command, "-m", path] if command == "run" else [command, path]
        if command == "run":
            args += ["-p", "Once", "-n", "4", "--temp", "0", "-t", "1"]
        r = run_shoal(shoal_bin, *args, timeout=120)
        assert r.returncode >= 0, f"{name}: killed by signal {-r.returncode}\n{r.stderr[-2000:]}"
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, f"{name}:\n{r.stderr[-3000:]}"
        if name in must_fail:
            assert r.returncode == 1, f"{name}: exit {r.returncode}"
        if r.returncode != 0:
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            assert len(lines) == 1 and lines[0].startswith("error: "), f"{name}: {r.stderr!r}"
            assert str(path) in lines[0], f"{name}: error does not name the file: {lines[0]}"


def test_invalid_shared_file_is_refused_by_name(shoal_bin, test_data):
    r = run_shoal(shoal_bin, "inspect", test_data / "models/invalid/tinyllamas-stories-260k-q8_0.gguf")
    assert r.returncode == 1
    assert "blk.0.ffn_down.weight" in r.stderr and "not a multiple" in r.stderr
    assert r.stderr.count("\n") == 1


def test_missing_file_and_unsupported_architecture(shoal_bin, test_data, tmp_path):
    r = run_shoal(shoal_bin, "run", "-m", tmp_path / "nope.gguf", "-p", "x")
    assert r.returncode == 1 and r.stderr.startswith("error: cannot open")
    # A vocab-only GGUF of architecture gpt2: refused by name, not crashed on.
    r = run_shoal(shoal_bin, "run", "-m", test_data / "tokenizer-vectors/ggml-vocab-gpt-2.gguf", "-p", "x")
    assert r.returncode == 1 and "unsupported architecture 'gpt2'" in r.stderr
    assert "supported: llama, qwen2, qwen3, qwen3moe, gemma3" in r.stderr, r.stderr
