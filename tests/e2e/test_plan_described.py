"""`shoal plan --cluster`: a cluster described in a TOML file (examples/clusters/)
is planned without contacting anything: every device is listed with what it
lends, the split covers every layer, and a model too big says what is missing."""
import re
from pathlib import Path

import pytest

from conftest import ROOT, run_shoal

EXAMPLES = sorted((ROOT / "examples" / "clusters").glob("*.toml"))


@pytest.mark.parametrize("cluster", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_cluster_is_planned(shoal_bin, smollm2, cluster):
    r = run_shoal(shoal_bin, "plan", "-m", smollm2, "--cluster", cluster, timeout=60)
    assert r.returncode == 0, r.stderr
    names = re.findall(r'^name = "([^"]+)"', cluster.read_text(), re.M)
    assert names and "described, nothing contacted" in r.stdout
    layers = []
    for name in names:
        assert re.search(rf"^  {re.escape(name)} .*GiB usable, decode reads [\d.]+ GB/s", r.stdout, re.M), r.stdout
        m = re.search(rf"^{re.escape(name)} +\S+ +(\d+)-(\d+) \(\d+\)", r.stdout, re.M)
        if m:
            layers.append((int(m.group(1)), int(m.group(2))))
    layers.sort()
    assert layers[0][0] == 0 and layers[-1][1] == 29, r.stdout  # SmolLM2's 30 layers, all placed
    assert all(a[1] + 1 == b[0] for a, b in zip(layers, layers[1:])), r.stdout
    assert re.search(r"predicted decode: [\d.]+ ms/token \([\d.]+ tok/s\)", r.stdout)


def test_a_cluster_too_small_says_what_is_missing(shoal_bin, smollm2, tmp_path):
    tiny = tmp_path / "tiny.toml"
    tiny.write_text('[[device]]\nname = "a"\nmemory_gb = 4.05\nbandwidth_gbps = 10\ndecode_efficiency = 0.5\n')
    r = run_shoal(shoal_bin, "plan", "-m", smollm2, "--cluster", tiny, timeout=60)
    assert r.returncode == 1 and "MiB missing" in r.stderr, r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[[device]]\nname = "a"\ncatalogue = "cray-1"\n')
    r = run_shoal(shoal_bin, "plan", "-m", smollm2, "--cluster", bad, timeout=60)
    assert r.returncode == 1 and "'cray-1' is not in the catalogue" in r.stderr, r.stderr


@pytest.mark.parametrize("cluster", EXAMPLES, ids=lambda p: p.stem)
def test_a_catalogue_model_is_planned_without_a_file(shoal_bin, cluster):
    """-m name:quant: a 70B model planned from the catalogue, with Shoal's
    prediction and llama.cpp RPC's beside it."""
    r = run_shoal(shoal_bin, "plan", "-m", "llama-3.3-70b:q4_k_m", "--cluster", cluster, timeout=60)
    if "four-raspberry-pi-5" in cluster.stem:  # 4 x 12 GiB usable cannot hold 40 GiB + KV
        assert r.returncode == 0 or "MiB missing" in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr
    if r.returncode == 0:
        assert "Llama 3.3 70B q4_k_m (catalogue: 70.55 B weights, 80 layers" in r.stdout, r.stdout
        ours = re.search(r"shoal \(star\), split by (speed|memory) +tg: +[\d.]+ ms/token \( *([\d.]+) tok/s\) +"
                         r"pp512: +([\d.]+) tok/s", r.stdout)
        theirs = re.search(r"llama.cpp RPC, split by memory +tg: +[\d.]+ ms/token \( *([\d.]+) tok/s\)", r.stdout)
        assert ours and theirs, r.stdout
        # Same devices, fewer round trips and (where it helps) a split by speed: never slower.
        assert float(ours.group(2)) >= float(theirs.group(1)), r.stdout


def test_a_slow_device_gets_fewer_layers_when_split_by_speed(shoal_bin, tmp_path):
    """A 4090 beside a Raspberry Pi: by memory the Pi takes a third of the
    layers; by speed it keeps one (each device named keeps a layer), and
    the plan says the cluster would be faster without it."""
    cluster = tmp_path / "pc-and-pi.toml"
    cluster.write_text('[[device]]\nname = "pc"\ncatalogue = "rtx-4090"\n\n'
                       '[[device]]\nname = "pi"\ncatalogue = "raspberry-pi-5-16g"\nlink = { gbit = 1, rtt_ms = 0.3 }\n')

    def pi_layers(*extra):
        r = run_shoal(shoal_bin, "plan", "-m", "llama-3.1-8b:q4_k_m", "--cluster", cluster, *extra, timeout=60)
        assert r.returncode == 0, r.stderr
        m = re.search(r"^pi +raspberry-pi-5-16g +(none|\d+-\d+ \((\d+)\))", r.stdout, re.M)
        assert m, r.stdout
        tok_s = float(re.search(r"predicted decode: [\d.]+ ms/token \(([\d.]+) tok/s\)", r.stdout).group(1))
        return int(m.group(2) or 0), tok_s, r.stdout

    by_memory, memory_tok_s, _ = pi_layers("--split", "memory")
    by_speed, speed_tok_s, out = pi_layers()
    assert by_memory >= 8 and by_speed == 1, out
    assert speed_tok_s > 2 * memory_tok_s and "split by speed:" in out, out
    assert re.search(r"^with no layers on pi: [\d.]+ ms/token", out, re.M), out


def test_unknown_catalogue_model_and_quant_are_named(shoal_bin):
    cluster = EXAMPLES[0]
    r = run_shoal(shoal_bin, "plan", "-m", "gpt-9:q4_0", "--cluster", cluster, timeout=60)
    assert r.returncode == 1 and "neither a file nor a catalogue model" in r.stderr, r.stderr
    r = run_shoal(shoal_bin, "plan", "-m", "llama-2-7b:q3_x", "--cluster", cluster, timeout=60)
    assert r.returncode == 1 and "no quantisation 'q3_x'" in r.stderr, r.stderr
    r = run_shoal(shoal_bin, "run", "-m", "llama-2-7b:q4_0", "-p", "hi", timeout=60)
    assert r.returncode == 1 and r.stderr.strip(), r.stderr
