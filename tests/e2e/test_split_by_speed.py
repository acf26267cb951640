"""Placement by measured speed on a live cluster: a worker whose CPU a
real-time neighbour takes 3/4 of (tests/tools/cpu_share.py) is probed on
the model's own matrices at plan time and gets fewer layers than its memory
allows; --split memory still splits by memory; and `shoal run -v` shows each
stage's predicted and measured decode step. No speed is asserted here (that
is bench/cluster_bench.py --parts speed): only what the planner decided
from what it measured, and that the text is the local run's."""
import os
import re
import sys

import pytest

from conftest import ROOT, run_shoal

sys.path.insert(0, str(ROOT / "tests" / "tools"))
from cpu_share import CpuShare, CpuShareUnavailable  # noqa: E402

# Runs alone, not beside other tests (a real-time neighbour spins on one CPU to make a slow device):
# scripts/test runs the serial tests after the others, which go two at a time.
pytestmark = pytest.mark.serial


def layers_of(err, address):
    m = re.search(rf"^{re.escape(address)} +CPU +(?:none|\d+-\d+ \((\d+)\))", err, re.M)
    assert m, err
    return int(m.group(1) or 0)


def test_a_slow_worker_gets_fewer_layers_and_every_stage_is_reported(shoal_bin, smollm2, workers):
    try:
        share = CpuShare(0.75).__enter__()
    except CpuShareUnavailable as e:
        pytest.skip(str(e))
    own = os.sched_getaffinity(0)
    try:
        fast, slow = workers(2)
        share.move(slow.proc.pid, share.slow_cpus)
        share.move(fast.proc.pid, share.other_cpus)
        os.sched_setaffinity(0, share.other_cpus)  # the primaries this test starts, too
        common = ["-m", smollm2, "-p", "The capital of France is", "-n", "12", "--temp", "0", "-t", "1",
                  "--rpc", f"{fast.address},{slow.address}"]
        by_memory = run_shoal(shoal_bin, "run", *common, "--split", "memory", timeout=300)
        assert by_memory.returncode == 0, by_memory.stderr
        by_speed = run_shoal(shoal_bin, "run", *common, "-v", timeout=300)
        assert by_speed.returncode == 0, by_speed.stderr
        local = run_shoal(shoal_bin, "run", *common[:-2], timeout=300)
        assert by_speed.stdout == by_memory.stdout == local.stdout

        err = by_speed.stderr
        assert layers_of(by_memory.stderr, slow.address) >= 8, by_memory.stderr  # a third of 30 by memory
        assert 1 <= layers_of(err, slow.address) < layers_of(by_memory.stderr, slow.address), err
        assert re.search(r"^split by speed: [\d.]+ ms/token predicted, against [\d.]+ by memory alone", err, re.M), err
        # The stage report: every stage with a prediction and a measurement of the 11 single-token steps.
        rows = re.findall(r"^(local|127\.0\.0\.1:\d+) +(\d+)-(\d+) +([\d.]+) +([\d.]+) +(\d+) +([+-]\d+%)$", err, re.M)
        assert {r[0] for r in rows} >= {"local", slow.address}, err
        assert all(float(r[3]) > 0 and float(r[4]) > 0 and int(r[5]) == 11 for r in rows), err
        assert "predicted decode step:" in err
    finally:
        os.sched_setaffinity(0, own)
        share.__exit__()
