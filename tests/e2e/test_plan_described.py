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
