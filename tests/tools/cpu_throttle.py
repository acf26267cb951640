"""A CPU-throttled group of processes, for tests and benches of a slow device:

    with CpuThrottle(share=0.25) as slow:   # a quarter of one CPU
        p = subprocess.Popen([...])
        slow.add(p.pid)

A cgroup named shoal-test-<pid>-slow under the cpu controller: cgroup v2
(cpu.max) where the unified hierarchy has it, else v1 (cpu.cfs_quota_us /
cpu.cfs_period_us). The period is short (4 ms: a quarter of it is the 1 ms least quota the kernel takes) so that a step of a few
milliseconds is throttled inside itself, not only between steps. Exit moves
what is left back to the parent group and removes the group. Needs root;
otherwise CpuThrottleUnavailable, which tests turn into a skip.
"""
import os
from pathlib import Path

PERIOD_US = 4000


class CpuThrottleUnavailable(RuntimeError):
    """No writable cgroup cpu controller here."""


def _cpu_root():
    v2 = Path("/sys/fs/cgroup")
    if (v2 / "cgroup.controllers").exists() and "cpu" in (v2 / "cgroup.controllers").read_text().split():
        return v2, 2
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, 1
    raise CpuThrottleUnavailable("no cgroup cpu controller (v1 or v2) here")


class CpuThrottle:
    def __init__(self, share):
        self.share = share
        self.root, self.version = _cpu_root()
        self.path = self.root / f"shoal-test-{os.getpid()}-slow"

    def __enter__(self):
        try:
            self.path.mkdir(exist_ok=True)
            quota = max(1000, int(PERIOD_US * self.share))
            if self.version == 2:
                (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}\n")
            else:
                (self.path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
                (self.path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        except OSError as e:
            self.__exit__()
            raise CpuThrottleUnavailable(f"cannot make {self.path}: {e}") from e
        return self

    def add(self, pid):
        """Moves the process (all its threads) into the group."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def __exit__(self, *exc):
        if not self.path.exists():
            return
        try:
            for pid in (self.path / "cgroup.procs").read_text().split():
                try:
                    (self.root / "cgroup.procs").write_text(f"{pid}\n")
                except OSError:
                    pass  # gone meanwhile
            self.path.rmdir()
        except OSError:
            pass
