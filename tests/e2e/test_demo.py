"""scripts/demo — the README's first command — works end to end: two
workers with a fresh key, the split printed, the chat answered."""
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_answers_through_two_workers():
    r = subprocess.run([str(ROOT / "scripts" / "demo")], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert out.count("worker listening on 127.0.0.1:") == 2
    assert "cluster key required" in out
    assert out.count("loaded in") == 2
    assert "Paris" in r.stdout
