"""`shoal plan --cluster`: a cluster described in a TOML file (examples/clusters/)
is planned without contacting anything: every device is listed with what it
lends, the split covers every layer, and a model too big says what is missing."""
import os
import re
import subprocess
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


def test_an_unknown_key_is_named_with_where_it_is(shoal_bin, tmp_path):
    """A misspelt key would drop a number silently: it is an error that
    names the key, its table and its line."""
    cluster = tmp_path / "typo.toml"
    cluster.write_text('[[device]]\nname = "pc"\ncatalogue = "rtx-4090"\n\n'
                       '[[device]]\nname = "pi"\ncatalogue = "raspberry-pi-5-16g"\nreserv_gb = 2\n'
                       'link = { gbit = 1, rtt_ms = 0.3 }\n')
    r = run_shoal(shoal_bin, "plan", "-m", "llama-3.1-8b:q4_k_m", "--cluster", cluster, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "device 'pi': unknown key 'reserv_gb' in [[device]] 2 (line 8)" in r.stderr, r.stderr
    cluster.write_text('[[device]]\nname = "pc"\ncatalogue = "rtx-4090"\n\n'
                       '[[device]]\nname = "pi"\ncatalogue = "raspberry-pi-5-16g"\n'
                       'link = { gbits = 1, rtt_ms = 0.3 }\n')
    r = run_shoal(shoal_bin, "plan", "-m", "llama-3.1-8b:q4_k_m", "--cluster", cluster, timeout=60)
    assert r.returncode == 1 and "unknown key 'gbits' in link (line 8)" in r.stderr, r.stderr


def test_a_name_that_is_not_text_is_refused(shoal_bin, tmp_path):
    cluster = tmp_path / "number.toml"
    cluster.write_text('[[device]]\nname = 4090\ncatalogue = "rtx-4090"\n')
    r = run_shoal(shoal_bin, "plan", "-m", "llama-3.1-8b:q4_k_m", "--cluster", cluster, timeout=60)
    assert r.returncode == 1 and "device 1: 'name' must be text in quotes" in r.stderr, r.stderr


HOSTILE = {
    # TOML escapes that decode to terminal controls: ESC (clear screen, set
    # the window title), BEL, a C1 CSI.
    "escape-in-name": '[[device]]\nname = "pc\\u001b[2J\\u001b]0;owned\\u0007"\ncatalogue = "rtx-4090"\n',
    "c1-in-name": '[[device]]\nname = "pc\\u009b2J"\ncatalogue = "rtx-4090"\n',
    "escape-in-catalogue": '[[device]]\nname = "pc"\ncatalogue = "rtx\\u001b[31m"\n',
    "raw-escape": '[[device]]\nname = "pc\x1b[2J"\ncatalogue = "rtx-4090"\n',
}


def plan_bytes(shoal_bin, *args):
    """stdout and stderr as bytes: a text decode would hide what reached the terminal."""
    r = subprocess.run([shoal_bin, "plan", *map(str, args)], capture_output=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def assert_terminal_safe(out):
    out.decode("utf-8")  # never invalid UTF-8
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", out), out


@pytest.mark.parametrize("name", HOSTILE, ids=list(HOSTILE))
def test_control_characters_never_reach_the_terminal(shoal_bin, tmp_path, name):
    cluster = tmp_path / "hostile.toml"
    cluster.write_bytes(HOSTILE[name].encode("utf-8"))
    rc, out = plan_bytes(shoal_bin, "-m", "llama-3.1-8b:q4_k_m", "--cluster", cluster)
    assert rc == 1, out
    assert_terminal_safe(out)


def test_cut_utf8_and_a_hostile_file_name_never_reach_the_terminal(shoal_bin, tmp_path):
    cut = tmp_path / "cut.toml"
    cut.write_bytes(b'[[device]]\nname = "caf\xc3"\ncatalogue = "rtx-4090"\n')
    rc, out = plan_bytes(shoal_bin, "-m", "llama-3.1-8b:q4_k_m", "--cluster", cut)
    assert rc == 1 and b"not valid TOML" in out, out
    assert_terminal_safe(out)
    # The path itself is echoed in the plan's header and in errors.
    for text in (b'[[device]]\nname = "pc"\ncatalogue = "rtx-4090"\n', b'[[device]]\nname = "pc"\n'):
        hostile = tmp_path / os.fsdecode(b"\x1b[2J\xff.toml")
        hostile.write_bytes(text)
        rc, out = plan_bytes(shoal_bin, "-m", "llama-3.1-8b:q4_k_m", "--cluster", hostile)
        assert_terminal_safe(out)
        assert b"\\x1b[2J\xef\xbf\xbd.toml" in out, out


def test_more_devices_than_layers_is_reported(shoal_bin, tmp_path):
    """40 named devices for 32 layers: eight hold none, and every device
    keeping its one layer makes decode more than twice as slow as one would:
    the plan says both."""
    text = '[[device]]\nname = "d0"\ncatalogue = "rtx-4090"\n'
    for i in range(1, 40):
        text += f'\n[[device]]\nname = "d{i}"\ncatalogue = "rtx-4090"\nlink = {{ gbit = 10, rtt_ms = 0.2 }}\n'
    cluster = tmp_path / "forty.toml"
    cluster.write_text(text)
    r = run_shoal(shoal_bin, "plan", "-m", "llama-2-7b:q4_0", "--cluster", cluster, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "40 devices for 32 layers: at most 32 can hold a layer, the other 8 hold none" in r.stderr, r.stderr
    m = re.search(r"^with no layers on d\d+(, d\d+)* and \d+ more: ([\d.]+) ms/token", r.stdout, re.M)
    assert m, r.stdout
    planned = float(re.search(r"predicted decode: ([\d.]+) ms/token", r.stdout).group(1))
    assert planned > 2 * float(m.group(2)), r.stdout


@pytest.mark.parametrize("args,flag,allowed", [
    (["-c", "0"], "--ctx-size", "8..1048576"),
    (["-c", "-5"], "--ctx-size", "8..1048576"),
    (["--parallel", "-1"], "--parallel", "1..256"),
    (["--parallel", "0"], "--parallel", "1..256"),
    (["-b", "0"], "--batch-size", "1..4096"),
    (["-b", "-3"], "--batch-size", "1..4096"),
    (["-ub", "-1"], "--ubatch-size", "0..4096"),  # -ub 0 means whole batches: allowed
    (["-c", "lots"], "--ctx-size", "8..1048576"),
])
def test_a_bad_number_exits_1_with_one_line_naming_the_flag(shoal_bin, args, flag, allowed):
    r = run_shoal(shoal_bin, "plan", "-m", "llama-2-7b:q4_0", "--cluster", EXAMPLES[0], *args, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: ") and allowed in lines[0], r.stderr


@pytest.mark.parametrize("command", ["run", "bench", "chat", "serve"])
def test_every_command_refuses_a_zero_batch_before_loading(shoal_bin, command):
    r = run_shoal(shoal_bin, command, "-m", "/nonexistent.gguf", "-b", "0", timeout=60)
    assert r.returncode == 1 and "--batch-size: 0 is outside 1..4096" in r.stderr, r.stderr
    if command == "serve":
        r = run_shoal(shoal_bin, command, "-m", "/nonexistent.gguf", "--parallel", "0", timeout=60)
        assert r.returncode == 1 and "--parallel: 0 is outside 1..256" in r.stderr, r.stderr


def test_help_and_version_still_exit_0(shoal_bin):
    assert run_shoal(shoal_bin, "--version", timeout=60).returncode == 0
    r = run_shoal(shoal_bin, "plan", "--help", timeout=60)
    assert r.returncode == 0 and "--cluster" in r.stdout, r.stderr
    r = run_shoal(shoal_bin, "plan", "--no-such-flag", timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("error: "), r.stderr


def test_prompts_and_tokens_are_planned_on_the_machines_that_do_each_best(shoal_bin):
    """The seeds' Spark beside a Mac Studio: a long prompt goes to the Spark
    (it computes ~2.5x faster), the tokens stay on the Mac (it reads memory
    ~3x faster), and the cache the prompt leaves is moved between them."""
    cluster = ROOT / "examples" / "clusters" / "mac-studio-and-dgx-spark.toml"
    args = ("plan", "-m", "llama-3.1-8b:f16", "--cluster", cluster, "--prompt-tokens", "8192", "--gen-tokens", "32")
    r = run_shoal(shoal_bin, *args, timeout=60)
    assert r.returncode == 0, r.stderr
    joint = re.search(r"prompt and tokens on the plan above +TTFT +([\d.]+) s, .* total +([\d.]+) s", r.stdout)
    split = re.search(r"prompt on spark \(layers 0-31\) +TTFT +([\d.]+) s, .* total +([\d.]+) s", r.stdout)
    assert joint and split, r.stdout
    assert float(split.group(1)) < float(joint.group(1)) / 2 and float(split.group(2)) < float(joint.group(2)), r.stdout
    took = re.search(r"takes: prompts on spark \(layers 0-31\), tokens on mac-studio \(layers 0-(\d+)\)", r.stdout)
    assert took, r.stdout
    # What the Mac decodes moves there: 8192 positions x 1024 K + 1024 V values in f16 a layer;
    # a layer the Spark decodes too keeps its cache where it is.
    moved = re.search(r"cache moved: ([\d.]+) GB", r.stdout)
    assert moved and abs(float(moved.group(1)) - 8192 * (int(took.group(1)) + 1) * 2048 * 2 / 1e9) < 0.01, r.stdout
    # A short prompt stays where the tokens are.
    short = run_shoal(shoal_bin, *args[:-4], "--prompt-tokens", "16", "--gen-tokens", "256", timeout=60)
    assert short.returncode == 0 and "takes: the joint placement" in short.stdout, short.stdout
    # Forced, and a name that is no device.
    forced = run_shoal(shoal_bin, *args, "--prefill-on", "mac-studio", timeout=60)
    assert forced.returncode == 0 and "prompt on mac-studio (layers 0-31)" in forced.stdout, forced.stdout
    bad = run_shoal(shoal_bin, *args, "--prefill-on", "cray-1", timeout=60)
    assert bad.returncode == 1 and "--prefill-on cray-1: no such device" in bad.stderr, bad.stderr
    assert "mac-studio, spark" in bad.stderr
