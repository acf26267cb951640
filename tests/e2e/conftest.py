"""Fixtures for the end-to-end tests: the shoal binary, the small test files
kept in tests/data, and models fetched by scripts/fetch-models."""
import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_DATA = ROOT / "tests" / "data"


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: the smoke tests of `scripts/test --quick` (one model served, a "
                                       "two-worker split, a recovery, a template against jinja2)")
    config.addinivalue_line("markers", "serial: measures time or CPU, so runs alone (scripts/test runs these after "
                                       "the others, which go two at a time with pytest-xdist)")


@pytest.fixture(scope="session")
def shoal_bin():
    path = Path(os.environ.get("SHOAL_BIN", ROOT / "build" / "shoal"))
    if not path.exists():
        pytest.fail(f"shoal binary not found at {path}: build first (scripts/build)")
    return str(path)


@pytest.fixture(scope="session")
def test_data():
    return TEST_DATA


def fetch(name):
    out = subprocess.run([str(ROOT / "scripts" / "fetch-models"), name], check=True,
                         capture_output=True, text=True, timeout=1800)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def smollm2():
    return fetch("smollm2-135m")


@pytest.fixture(scope="module")
def qwen(shoal_bin, tmp_path_factory):
    """`shoal serve` on Qwen2.5-Coder-0.5B (tools, constrained output, agents), one per test module."""
    from server_fixtures import Server
    s = Server(shoal_bin, fetch("qwen2.5-coder-0.5b"), tmp_path_factory.mktemp("qwen"))
    yield s
    s.stop()


def random_model(name):
    """A random-weight GGUF of one architecture (tests/models/make_random_models.py)."""
    out = subprocess.run([str(ROOT / "tests" / "models" / "make_random_models.py"), name], check=True,
                         capture_output=True, text=True, timeout=600)
    return out.stdout.strip().splitlines()[-1]


# The architectures beyond llama/qwen2, each as a small random-weight model
# (Gemma 4 by its MoE and E2B-like files, which between them hold every
# block variant of the dense one: random-gemma4 is held to llama.cpp by the
# golden and determinism tests).
RANDOM_MODELS = ["random-qwen3", "random-gemma3", "random-qwen3moe", "random-mixtral", "random-llama3", "random-qwen35",
                 "random-qwen35moe", "random-qwen3-yarn", "random-gpt-oss",
                 "random-gpt-oss-mxfp4", "random-deepseek2", "random-qwen3next", "random-glm4moe",
                 "random-minimax-m2", "random-gemma4moe", "random-gemma4e"]


def run_shoal(shoal_bin, *args, timeout=600, input=None):
    return subprocess.run([shoal_bin, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, input=input)


class ManagedProcess:
    """A child process whose stderr goes to a log file; stop() always ends it."""

    proc = None
    log = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def alive(self):
        return self.proc.poll() is None

    def stderr(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, timeout=15):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process hears SIGTERM only once continued
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()


class Worker(ManagedProcess):
    """A `shoal worker` process on loopback with its own cache dir; the port
    is chosen by the kernel and read from the worker's first line."""

    def __init__(self, shoal_bin, tmp, *args, key_file=None, threads=1, port=0, cache=None):
        self.cache = cache or tmp / f"cache-{os.getpid()}-{id(self)}"
        self.args = (shoal_bin, tmp, *args)
        self.key_file = key_file
        self.threads = threads
        argv = [shoal_bin, "worker", "--port", str(port), "-t", str(threads), "--cache-dir", str(self.cache),
                *map(str, args)]
        if key_file:
            argv += ["--key-file", str(key_file)]
        self.log = open(tmp / f"worker-{id(self)}.log", "w+")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.stop()
            raise RuntimeError(f"worker did not start: {line!r} {self.stderr()}")
        self.port = int(line.split()[3].rsplit(":", 1)[1])
        self.address = f"127.0.0.1:{self.port}"

    def restart(self):
        """The same worker again: same port, same cache dir, same flags."""
        self.stop()
        return Worker(*self.args, key_file=self.key_file, threads=self.threads, port=self.port, cache=self.cache)


@pytest.fixture
def workers(shoal_bin, tmp_path):
    """workers(n, ...) starts n workers; all are stopped after the test."""
    started = []

    def start(n=1, *args, key_file=None, threads=1, port=0):
        new = [Worker(shoal_bin, tmp_path, *args, key_file=key_file, threads=threads, port=port) for _ in range(n)]
        started.extend(new)
        return new

    def restart(worker):
        new = worker.restart()
        started.append(new)
        return new

    start.restart = restart

    yield start
    for w in started:
        w.stop()


@pytest.fixture
def netns():
    """netns(n) makes n test hosts on a private bridge (tests/tools/netns.py),
    or skips the test where namespaces cannot be made; removed afterwards."""
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "tools"))
    from netns import Netns, NetnsUnavailable
    made = []

    def make(n_hosts):
        try:
            net = Netns(n_hosts=n_hosts)
            net.__enter__()
        except NetnsUnavailable as e:
            pytest.skip(str(e))
        made.append(net)
        return net

    yield make
    for net in made:
        net.close()


@pytest.fixture
def serve_cluster(shoal_bin, smollm2, tmp_path):
    """serve_cluster(workers, *args): `shoal serve` on SmolLM2 over the
    workers, -t 1, --worker-timeout 2 (the fault tests' timeout); stopped
    after the test."""
    from server_fixtures import Server
    started = []

    def start(workers, *args):
        s = Server(shoal_bin, smollm2, tmp_path, "--rpc", ",".join(w.address for w in workers), "--worker-timeout",
                   2, "-c", 512, *args, threads=1)
        s.model = Path(smollm2).name
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
