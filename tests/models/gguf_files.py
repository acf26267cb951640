"""What the test-model scripts share: GGUF copies with new tensors or
metadata (gguf-py), and files pinned by sha256 (a generated file that does
not match the one the committed references were made on is an error)."""
import hashlib
import sys

import gguf


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def copy_metadata(reader, writer, skip=()):
    """Every key of `reader` into `writer`, but general.architecture (the
    writer has it) and the keys in `skip`."""
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in skip:
            continue
        vtype = field.types[0]
        writer.add_key_value(key, field.contents(), vtype, field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)


def writer_like(reader, path):
    """A GGUFWriter at `path` for the architecture of `reader`."""
    return gguf.GGUFWriter(str(path), arch=reader.fields["general.architecture"].contents())


def finish(writer):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def copy_with(src, dst, skip=(), add=None):
    """A copy of the GGUF `src` at `dst` without the keys in `skip`, and with
    add(writer) called for new ones; the tensors as they are."""
    r = gguf.GGUFReader(str(src))
    w = writer_like(r, dst)
    copy_metadata(r, w, skip=skip)
    if add:
        add(w)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    finish(w)
    return dst


def with_chat_template(src, dst, template):
    """A copy of the GGUF `src` whose tokenizer.chat_template is `template`."""
    return copy_with(src, dst, skip=("tokenizer.chat_template",), add=lambda w: w.add_chat_template(template))


def make_pinned(name, path, expected, write, print_hashes=False):
    """Writes `path` with write(tmp_path) unless it is there with sha256
    `expected`; returns False (and says why) when the new file's hash is not
    `expected`. print_hashes: always rewrite, print the hash, accept it."""
    if not print_hashes and path.exists() and sha256(path) == expected:
        return True
    tmp = path.with_suffix(".tmp")
    write(tmp)
    digest = sha256(tmp)
    if print_hashes:
        print(f"{name} {digest}", file=sys.stderr)
    elif digest != expected:
        tmp.unlink()
        print(f"error: {name}: made a file with sha256 {digest}, expected {expected} (numpy or gguf-py changed "
              "what it writes; regenerate the references, see tests/golden/README.md)", file=sys.stderr)
        return False
    tmp.replace(path)
    return True
