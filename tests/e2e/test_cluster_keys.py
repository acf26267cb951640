"""Cluster keys (docs/protocol.md, "Cluster keys"): `shoal keygen` makes
them, weak ones are refused with the way to make a good one, and a passphrase
on both ends gives both the same key."""
import os
import stat
import subprocess

from conftest import run_shoal


def shoal_env(shoal_bin, *args, env, timeout=60):
    full = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_CLUSTER_")}
    return subprocess.run([shoal_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**full, **env})


def test_keygen_writes_a_private_file_and_never_overwrites(shoal_bin, tmp_path):
    f = tmp_path / "cluster.key"
    r = run_shoal(shoal_bin, "keygen", "-o", f, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # the key went to the file only
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    key = f.read_text()
    assert len(key) == 65 and key.endswith("\n") and int(key, 16) > 0
    r = run_shoal(shoal_bin, "keygen", "-o", f, timeout=30)
    assert r.returncode == 1 and "exists" in r.stderr, r.stderr
    assert f.read_text() == key
    r = run_shoal(shoal_bin, "keygen", timeout=30)
    assert r.returncode == 0 and len(r.stdout) == 65 and r.stdout != key


def test_worker_with_a_weak_key_exits_with_the_keygen_hint(shoal_bin, tmp_path):
    weak = tmp_path / "weak.key"
    weak.write_text("0123456789abcdef\n")  # 16 bytes: what used to pass
    weak.chmod(0o600)
    r = shoal_env(shoal_bin, "worker", "--port", 0, "--key-file", weak, env={})
    assert r.returncode == 1 and "shoal keygen" in r.stderr, r.stderr
    r = shoal_env(shoal_bin, "worker", "--port", 0, env={"SHOAL_CLUSTER_KEY": "0" * 64})
    assert r.returncode == 1 and "shoal keygen" in r.stderr and "SHOAL_CLUSTER_KEY" in r.stderr, r.stderr
    r = shoal_env(shoal_bin, "worker", "--port", 0, env={"SHOAL_CLUSTER_PASSPHRASE": "hunter2"})
    assert r.returncode == 1 and "at least 12" in r.stderr, r.stderr


def test_readable_key_file_is_warned_about(shoal_bin, tmp_path):
    f = tmp_path / "cluster.key"
    assert run_shoal(shoal_bin, "keygen", "-o", f, timeout=30).returncode == 0
    f.chmod(0o644)
    r = shoal_env(shoal_bin, "ping", "--key-file", f, env={})  # no --rpc: fails after the key is read
    assert "chmod 600" in r.stderr, r.stderr


def test_same_passphrase_on_both_ends_connects(shoal_bin, workers, tmp_path):
    secret = tmp_path / "passphrase"
    secret.write_text("tide pools at low water\n")
    secret.chmod(0o600)
    [w] = workers(1, "--key-passphrase-file", secret)
    r = shoal_env(shoal_bin, "ping", "--rpc", w.address, env={"SHOAL_CLUSTER_PASSPHRASE": "tide pools at low water"})
    assert r.returncode == 0, r.stderr
    assert w.address in r.stdout
    r = shoal_env(shoal_bin, "ping", "--rpc", w.address, env={"SHOAL_CLUSTER_PASSPHRASE": "tide pools at high water"})
    assert r.returncode == 1 and "wrong cluster key" in r.stderr, r.stderr
    assert w.alive()
