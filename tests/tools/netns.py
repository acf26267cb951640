"""Network namespaces for tests: a few isolated "hosts" on one private switch.

    with Netns(n_hosts=2) as net:
        srv = net.popen(1, ["python3", "-m", "http.server", "8000"])
        net.run(0, ["curl", f"http://{net.addr(1)}:8000/"])
        net.set_rate(1, 100)      # tc tbf, both directions of host 1's link
        net.cut(1)                # host 1's link down; net.restore(1) brings it back

Topology: namespaces shoal-test-<pid>-<i> (hosts) and shoal-test-<pid>-sw (a
switch holding a bridge). Each host has one veth, "eth0", with address
10.77.<k>.<i+1>/24; its peer "p<i>" is a port of the bridge in the switch
namespace. Everything is created inside those namespaces: the root namespace
gets no interface, address or route, and no traffic leaves the test's
namespaces. Exit deletes every namespace (also on exceptions), which removes
the veths with them. Namespaces of crashed runs (pid no longer alive) are
removed on the next start.

Needs root and a working `ip netns`; otherwise NetnsUnavailable is raised, which
tests turn into pytest.skip.
"""
import os
import re
import shutil
import subprocess

PREFIX = "shoal-test-"


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be used here (not root, or no `ip netns`)."""


def _ip(*args, check=True, timeout=10):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


def list_test_namespaces():
    out = _ip("netns", "list", check=False)
    return [line.split()[0] for line in out.stdout.splitlines()
            if line.strip().startswith(PREFIX)]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale():
    """Delete shoal-test-<pid>-* namespaces whose creating process is gone."""
    for name in list_test_namespaces():
        m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
        if m and not _alive(int(m.group(1))):
            _ip("netns", "del", name, check=False)


def check_available():
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root")
    if shutil.which("ip") is None:
        raise NetnsUnavailable("iproute2 `ip` not found")
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        r = _ip("netns", "add", probe, check=False)
        if r.returncode != 0:
            raise NetnsUnavailable(f"`ip netns add` failed: {r.stderr.strip()}")
        r = _ip("netns", "exec", probe, "ip", "link", "set", "lo", "up", check=False)
        if r.returncode != 0:
            raise NetnsUnavailable(f"`ip netns exec` failed: {r.stderr.strip()}")
    finally:
        _ip("netns", "del", probe, check=False)


class Netns:
    def __init__(self, n_hosts=2, subnet=77, k=None):
        if not 1 <= n_hosts <= 250:
            raise ValueError("n_hosts must be 1..250")
        self.n_hosts = n_hosts
        # The switch is private to this run, so k only needs to be valid.
        self.k = (os.getpid() % 250) + 1 if k is None else k
        self.subnet = subnet
        self.tag = f"{PREFIX}{os.getpid()}"
        self.names = [f"{self.tag}-{i}" for i in range(n_hosts)]
        self.switch = f"{self.tag}-sw"
        self._procs = []
        self._created = []

    # --- lifecycle -------------------------------------------------------
    def __enter__(self):
        check_available()
        cleanup_stale()
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _add_ns(self, name):
        _ip("netns", "del", name, check=False)  # leftover from a reused pid
        _ip("netns", "add", name)
        self._created.append(name)
        self.exec_ok(name, "ip", "link", "set", "lo", "up")

    def exec_ok(self, ns, *argv):
        return _ip("netns", "exec", ns, *argv)

    def _setup(self):
        self._add_ns(self.switch)
        self.exec_ok(self.switch, "ip", "link", "add", "br0", "type", "bridge")
        self.exec_ok(self.switch, "ip", "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            self._add_ns(name)
            # Created inside the switch namespace, peer moved straight into the
            # host namespace: nothing ever appears in the root namespace.
            self.exec_ok(self.switch, "ip", "link", "add", f"p{i}", "type", "veth",
                         "peer", "name", "eth0", "netns", name)
            self.exec_ok(self.switch, "ip", "link", "set", f"p{i}", "master", "br0")
            self.exec_ok(self.switch, "ip", "link", "set", f"p{i}", "up")
            self.exec_ok(name, "ip", "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            self.exec_ok(name, "ip", "link", "set", "eth0", "up")

    def close(self):
        for p in self._procs:
            if p.poll() is None:
                p.kill()
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        for name in reversed(self._created):
            _ip("netns", "del", name, check=False)
        self._created.clear()

    # --- use -------------------------------------------------------------
    def ns(self, i):
        return self.names[i]

    def addr(self, i):
        return f"10.{self.subnet}.{self.k}.{i + 1}"

    def _argv(self, i, argv):
        return ["ip", "netns", "exec", self.names[i], *map(str, argv)]

    def run(self, i, argv, timeout=60, check=False, **kw):
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(self._argv(i, argv), timeout=timeout, check=check, **kw)

    def popen(self, i, argv, **kw):
        """Start argv in host i; killed on exit if still running."""
        p = subprocess.Popen(self._argv(i, argv), **kw)
        self._procs.append(p)
        return p

    def set_rate(self, i, mbit, burst_kbit=None, latency_ms=50):
        """Limit host i's link to mbit Mbit/s each way (tc tbf); None removes it."""
        for ns, dev in ((self.names[i], "eth0"), (self.switch, f"p{i}")):
            _ip("netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
            if mbit is None:
                continue
            burst = burst_kbit if burst_kbit else max(32, int(mbit * 1000 * 0.002))
            _ip("netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                "rate", f"{mbit}mbit", "burst", f"{burst}kbit", "latency", f"{latency_ms}ms")

    def cut(self, i):
        """Take host i's link down: its packets go nowhere, others' don't reach it."""
        self.exec_ok(self.names[i], "ip", "link", "set", "eth0", "down")
        self.exec_ok(self.switch, "ip", "link", "set", f"p{i}", "down")

    def restore(self, i):
        self.exec_ok(self.switch, "ip", "link", "set", f"p{i}", "up")
        self.exec_ok(self.names[i], "ip", "link", "set", "eth0", "up")
        # The address's route goes with the link; put it back if needed.
        self.run(i, ["ip", "addr", "replace", f"{self.addr(i)}/24", "dev", "eth0"])
