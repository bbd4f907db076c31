"""The cores this process may compute on, and TVM's thread pool sized to them.

    available_cores()   the CPUs of the process's affinity mask (taskset, a cpuset cgroup),
                        fewer when a CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us)
                        allows less: a container given 1.5 CPUs of a 64-core machine
                        computes on 2 threads, not 64
    use_available_cores(free)  TVM_NUM_THREADS set to that count unless the user set it (or
                        OMP_NUM_THREADS, which TVM also reads); given a FreeCores window,
                        fewer: the cores other processes left idle in it (threads_for)
    FreeCores           a window over which /proc/stat's busy time of the process's CPUs,
                        less this process's own CPU time, says how many cores the rest of
                        the machine keeps busy (`Executable` opens it before loading the
                        host library and closes it after: the load is the window)
    PoolFollower        the pool's threads in use re-decided between runs, at most every
                        SAMPLE_S (a FreeCores window each time): TVM's pool is started with
                        every available core and `runtime.config_threadpool` sets how many
                        of them a parallel kernel uses (follow_load, before each run)
    cap_user_threads    TVM_NUM_THREADS / OMP_NUM_THREADS above the affinity mask's CPUs
                        capped to them, with one warning line (20000 took 18 s to start)

The rule (threads_for): threads = the idle cores rounded to the nearest whole, between 1
and the available cores. A parallel kernel's chunks are split statically among the pool's
threads, and a thread waiting for a core other processes hold stalls the barrier: at load
average 4-5 on this 2-core machine resnet_mini took 0.28-3.6 ms a call on two threads
against 0.25 ms on one (docs/tuning.md, "threads"). The default schedules split a parallel
loop into num-cores chunks of constant extent, so one thread runs them with the serial
loop's code. TVM reads the variable once, when its pool starts: the pool is started with
every available core, and the count a kernel uses follows the load (PoolFollower): the
window of the first library load, then one window per SAMPLE_S, read between runs. Load that
arrives within a window still meets a pool of two until the window ends (docs/tuning.md).

Left alone, TVM 0.27's runtime sizes its pool to std::thread::hardware_concurrency() / 2 on
x86 (it assumes two hyper-threads per core): 1 thread on a 2-core machine without SMT, and
on a machine with many cores it ignores both the affinity mask and the quota, so a process
confined to 1 core would start many threads that take turns on it.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

THREAD_VARIABLES = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")  # what TVM's runtime reads, in order
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
PROC_STAT = Path("/proc/stat")
IDLE_COLUMNS = (3, 4)  # of a /proc/stat cpuN line's times: idle, iowait (the rest is busy, nice included)
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc/stat's unit
MIN_WINDOW_S = 0.1  # FreeCores waits out the rest of a shorter window: /proc/stat counts in 10 ms ticks
SAMPLE_S = 0.1  # PoolFollower re-decides the threads at most this often (one /proc/stat read)
AFFINITY_BIG = 1  # runtime.config_threadpool's mode that TVM's pool starts with (kBig)
# A worker of TVM's pool waiting for a task yields its core this many times before it sleeps
# (TVM's default 300000): each yield, when other processes want the worker's core, lets them
# run a timeslice, and TVM joins its workers at exit only after their spin: under four busy
# loops (load average 10) a process that had finished its runs took 27 and 87 s to exit,
# 2.7 s with 200 (the interpreter's own exit). 200 is meant to outlast the gap between two
# parallel kernels of a run on an idle core (not measured idle).
POOL_SPIN_COUNT = 200


def available_cores(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """CPUs in the affinity mask, capped by the cgroup's CPU quota (rounded up)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def cgroup_cpu_quota(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (quota / period), or None: no
    quota, or no cgroup file to read. The tightest of the cgroup and its ancestors."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":  # cgroup v2: <root>/<path>/cpu.max = "quota period" or "max period"
            quotas += [_v2_quota(d / "cpu.max") for d in _ancestors(cgroup_root / relative, cgroup_root)]
        elif "cpu" in controllers.split(","):  # v1: <root>/cpu[,cpuacct]/<path>/cpu.cfs_quota_us
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                base = cgroup_root / mount
                quotas += [_v1_quota(d) for d in _ancestors(base / relative, base)]
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def _ancestors(directory: Path, root: Path) -> list[Path]:
    found = [directory]
    while directory != root and root in directory.parents:
        directory = directory.parent
        found.append(directory)
    return found


def _v2_quota(path: Path) -> float | None:
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" or int(period) <= 0 else int(quota) / int(period)


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def cap_user_threads(warn: Callable[[str], None] | None = None) -> int | None:
    """The user's TVM_NUM_THREADS (or OMP_NUM_THREADS, which TVM reads next) capped to the
    CPUs of the affinity mask, with one warning line naming the variable; the count TVM's
    pool now gets, or None when no variable was set or it was within the CPUs."""
    name = next((n for n in THREAD_VARIABLES if os.environ.get(n)), None)
    if name is None:
        return None
    try:
        asked = int(os.environ[name])
    except ValueError:  # TVM reads it with atoi: left to TVM
        return None
    cores = len(_affinity())
    if asked <= cores:
        return None
    os.environ["TVM_NUM_THREADS"] = str(cores)  # what TVM reads first; OMP_NUM_THREADS is left to others
    (warn or _stderr)(
        f"vpuc: warning: {name}={asked} is above the {cores} CPUs this process may use: {cores} threads"
    )
    return cores


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _affinity() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def use_available_cores(free: FreeCores | None = None) -> int | None:
    """Size TVM's thread pool to available_cores() (TVM_NUM_THREADS), to fewer when `free`
    saw other processes keep cores busy (threads_for), unless the user chose already; call
    before TVM's pool starts (its first parallel kernel): it reads the variable once. The
    count set, or None when the user's variable was kept."""
    if threads_chosen():
        return None
    cores = available_cores()
    if free is not None:
        cores = threads_for(cores, free.idle_cores())
    os.environ["TVM_NUM_THREADS"] = str(cores)
    return cores


def threads_chosen() -> bool:
    """Whether the pool's size is set already (by the user, or by an earlier use_available_cores)."""
    return any(os.environ.get(name) for name in THREAD_VARIABLES)


def threads_for(available: int, idle_cores: float | None) -> int:
    """Threads for a pool of at most `available`: the idle cores rounded to the nearest
    whole (half up), at least 1; all of them when nothing was measured (None)."""
    if idle_cores is None:
        return available
    return max(1, min(available, math.floor(idle_cores + 0.5)))


def cpu_ticks(text: str, cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) ticks of the CPUs `cpus` in /proc/stat's `text`; None if one is missing."""
    busy = total = found = 0
    for line in text.splitlines():
        if not line.startswith("cpu"):
            break  # the cpu lines come first; the rest (interrupt counts) is most of the file
        name, *fields = line.split()
        if name == "cpu" or int(name[3:]) not in cpus:
            continue
        ticks = [int(value) for value in fields[:8]]  # user nice system idle iowait irq softirq steal
        idle = sum(ticks[i] for i in IDLE_COLUMNS)
        busy, total, found = busy + sum(ticks) - idle, total + sum(ticks), found + 1
    return (busy, total) if found == len(cpus) else None


def idle_cores(before: tuple[int, int], after: tuple[int, int], cpus: int, own_cpu_s: float) -> float:
    """Cores left idle by other processes between two cpu_ticks readings of `cpus` CPUs,
    over which this process used `own_cpu_s` of CPU time: cpus - (busy - own) / window."""
    total = after[1] - before[1]
    if total <= 0:
        return float(cpus)
    window_s = total / cpus / TICKS_PER_S
    others_s = max(0.0, (after[0] - before[0]) / TICKS_PER_S - own_cpu_s)
    return max(0.0, cpus - others_s / window_s)


class FreeCores:
    """A window over which to count the cores other processes leave idle: opened at
    construction, read by `idle_cores()` (at least MIN_WINDOW_S after opening)."""

    def __init__(self, proc_stat: Path = PROC_STAT) -> None:
        self._proc_stat = proc_stat
        try:
            self._cpus = set(os.sched_getaffinity(0))
        except AttributeError:  # not Linux: nothing to read
            self._cpus = set()
        self._start = (time.monotonic(), time.process_time(), self._ticks())

    def _ticks(self) -> tuple[int, int] | None:
        try:
            return cpu_ticks(self._proc_stat.read_text(), self._cpus) if self._cpus else None
        except (OSError, ValueError):
            return None

    def idle_cores(self) -> float | None:
        """The cores of the affinity mask other processes left idle since opening; None
        where /proc/stat cannot be read."""
        opened, own_s, before = self._start
        time.sleep(max(0.0, MIN_WINDOW_S - (time.monotonic() - opened)))
        after = self._ticks()
        if before is None or after is None:
            return None
        return idle_cores(before, after, len(self._cpus), time.process_time() - own_s)


class PoolFollower:
    """The threads of TVM's pool a parallel kernel uses, following the load: `before_run()`
    (between runs, never per kernel) closes the current FreeCores window once it is
    SAMPLE_S old, opens the next, and sets the pool to threads_for(most, idle cores)
    through `configure` (runtime.config_threadpool: the pool keeps its `most` threads and
    uses that many; one thread runs a parallel loop's chunks in turn on the caller's). TVM's
    pool is per calling thread: a thread's first run sets its pool too."""

    def __init__(self, most: int, configure: Callable[[int], None], first: FreeCores,
                 proc_stat: Path = PROC_STAT) -> None:  # fmt: skip
        self.most, self._configure, self._proc_stat = most, configure, proc_stat
        self.threads = threads_for(most, first.idle_cores())
        self._window = FreeCores(proc_stat)
        self._opened = time.monotonic()
        self._applied = threading.local()  # the count this thread's pool was last set to

    def before_run(self) -> int:
        """The threads for the next run, the calling thread's pool set to them."""
        now = time.monotonic()
        if now - self._opened >= SAMPLE_S:
            self.threads = threads_for(self.most, self._window.idle_cores())
            self._window, self._opened = FreeCores(self._proc_stat), now
        if getattr(self._applied, "threads", None) != self.threads:
            self._configure(self.threads)
            self._applied.threads = self.threads
        return self.threads


_FOLLOWER: PoolFollower | None = None
_STARTED = False  # start_pool ran in this process


def start_pool(free: FreeCores | None) -> PoolFollower | None:
    """Size TVM's pool for this process, once, before its first parallel kernel: the user's
    count capped (cap_user_threads) and kept, or every available core with a PoolFollower
    that uses as many as `free`'s window (a new one when None), then each SAMPLE_S's, finds
    idle. None when the pool does not follow: the user chose, or one core is all there is."""
    global _FOLLOWER, _STARTED
    if _STARTED:
        return _FOLLOWER
    _STARTED = True
    if threads_chosen():
        cap_user_threads()
        return None
    most = available_cores()
    os.environ["TVM_NUM_THREADS"] = str(most)
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(POOL_SPIN_COUNT))  # read when the pool starts
    if most > 1:
        _FOLLOWER = PoolFollower(most, _config_threadpool, free or FreeCores())
    return _FOLLOWER


def follow_load() -> None:
    """Before a run on TVM's pool (`Executable.run`, the tuner's timings): its threads set
    to what the load leaves (PoolFollower), the pool started first if it was not."""
    if not _STARTED:
        start_pool(None)
    if _FOLLOWER is not None:
        _FOLLOWER.before_run()


def _config_threadpool(threads: int) -> None:
    import tvm_ffi

    tvm_ffi.get_global_func("runtime.config_threadpool")(AFFINITY_BIG, threads)
