"""A slow device by sharing one CPU with a busy neighbour, for tests and benches:

    with CpuShare(busy=0.75) as share:      # the neighbour takes 3/4 of the CPU
        argv = share.pin_slow() + [...]      # runs on that CPU
        other = share.pin_others() + [...]   # runs on the rest
        share.move(pid, share.slow_cpus)     # or moves a running process there

The neighbour is a real-time (SCHED_FIFO) process pinned to the last CPU that
spins for `busy` of every period and sleeps for the rest, so whatever else
runs there gets the gaps. The period is short (400 us) so that a step of a
fraction of a millisecond is slowed as much as a long one: the slowdown is
uniform, as on a slower machine. A cgroup quota (cpu.max) is not: its
least quota is 1 ms, and a step that fits in it runs at full speed.

The gaps come out shorter than period x (1 - busy), by the neighbour's wake-up
latency, so the slowdown is measured, not assumed (the device probes do).
The neighbour is stopped on exit. Needs root (real-time priority) and two
CPUs or more; otherwise CpuShareUnavailable, which tests turn into a skip.
"""
import os
import subprocess
import sys

PERIOD_S = 0.0004

# The neighbour: absolute deadlines, so one late wake-up does not shift the
# rest; it ends when its parent does, however the parent ends.
_NEIGHBOUR = """
import os, sys, time
cpu, busy, period = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
parent = os.getppid()
os.sched_setaffinity(0, {cpu})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
print("sharing", flush=True)
t = time.monotonic()
while os.getppid() == parent:
    end = t + busy * period
    while time.monotonic() < end:
        pass
    t += period
    gap = t - time.monotonic()
    if gap > 0:
        time.sleep(gap)
    else:
        t = time.monotonic()
"""


class CpuShareUnavailable(RuntimeError):
    """No second CPU, or no real-time priority for the neighbour."""


class CpuShare:
    def __init__(self, busy=0.75):
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise CpuShareUnavailable("one CPU only: nothing would be left for the other processes")
        self.busy, self.cpu, self.rest = busy, cpus[-1], cpus[:-1]
        self.slow_cpus, self.other_cpus = {self.cpu}, set(self.rest)
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _NEIGHBOUR, str(self.cpu), str(self.busy), str(PERIOD_S)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = self.proc.stdout.readline()
        except BaseException:
            self.__exit__()
            raise
        if line.strip() != "sharing":
            self.proc.kill()  # before reading what it said: it may not have ended
            err = self.proc.stderr.read()
            self.__exit__()
            raise CpuShareUnavailable(f"the neighbour did not start: {err.strip()[-300:]}")
        return self

    def pin_slow(self):
        """The command prefix that runs a process on the shared CPU."""
        return ["taskset", "-c", str(self.cpu)]

    def pin_others(self):
        """The command prefix that keeps a process off the shared CPU."""
        return ["taskset", "-c", ",".join(map(str, self.rest))]

    @staticmethod
    def move(pid, cpus):
        """Moves every thread of a running process (threads it starts later follow them)."""
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return  # ended already
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except ProcessLookupError:
                pass  # ended meanwhile

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        if self.proc:
            self.proc.wait()
            self.proc = None
