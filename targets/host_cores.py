"""The cores this process may compute on, and TVM's thread pool sized to them.

    available_cores()   the CPUs of the process's affinity mask (taskset, a cpuset cgroup),
                        fewer when a CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us)
                        allows less: a container given 1.5 CPUs of a 64-core machine
                        computes on 2 threads, not 64
    use_available_cores()  TVM_NUM_THREADS set to that count unless the user set it (or
                        OMP_NUM_THREADS, which TVM also reads), and the pool's workers'
                        spin after a kernel bounded (TVM_THREAD_POOL_SPIN_COUNT, POOL_SPIN_COUNT)

Left alone, TVM 0.27's runtime sizes its pool to std::thread::hardware_concurrency() / 2 on
x86 (it assumes two hyper-threads per core): 1 thread on a 2-core machine without SMT, and
on a machine with many cores it ignores both the affinity mask and the quota, so a process
confined to 1 core would start many threads that take turns on it.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

THREAD_VARIABLES = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")  # what TVM's runtime reads, in order
SPIN_VARIABLE = "TVM_THREAD_POOL_SPIN_COUNT"
# A worker of TVM's pool, its task done, calls sched_yield this many times waiting for the
# next before it sleeps. TVM's default, 300000, kept a worker spinning 180 ms of CPU after
# each call of resnet_mini (0.3 ms): a core taken from the user's other work, and from
# onnxruntime's threads in bench/cpu_vs_ort.py. 1000 spins about 0.6 ms of CPU, longer than
# the gaps between a model's kernels (resnet_mini's whole call: 0.3 ms), so a worker still
# finds the next kernel awake; docs/tuning.md, "threads".
POOL_SPIN_COUNT = 1000
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


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


def use_available_cores() -> int | None:
    """Size TVM's thread pool to available_cores() (TVM_NUM_THREADS) unless the user chose
    already; call before TVM's pool starts (its first parallel kernel): it reads the
    variable once. The count set (also when an earlier call set it), or None when the
    user's variable was kept. The workers' spin is bounded (POOL_SPIN_COUNT) unless the
    user set TVM_THREAD_POOL_SPIN_COUNT."""
    global _cores_set
    os.environ.setdefault(SPIN_VARIABLE, str(POOL_SPIN_COUNT))
    if _cores_set is not None and os.environ.get("TVM_NUM_THREADS") == str(_cores_set):
        return _cores_set
    if any(os.environ.get(name) for name in THREAD_VARIABLES):
        return None
    _cores_set = available_cores()
    os.environ["TVM_NUM_THREADS"] = str(_cores_set)
    return _cores_set


_cores_set: int | None = None  # the TVM_NUM_THREADS use_available_cores set, not the user


# How often PoolThreads looks at the machine again: /proc/stat counts in 10 ms ticks, so a
# quarter second gives 50 ticks on 2 cores (an error of a tick or two per reading).
CHECK_INTERVAL_S = 0.25
# More threads only after the cores were free this long (fewer at once): a load that comes
# and goes made a pool grown on one quiet look wait for cores taken again (resnet_mini at
# 1.43x onnxruntime's two threads in a run at load 1-2, 1.12x serial).
GROW_AFTER_S = 1.0
PROC_STAT = Path("/proc/stat")
_AFFINITY_MODE_BIG = 1  # TVM's ThreadGroup::kBig, what its pool starts with


class PoolThreads:
    """TVM's thread pool sized, before each call, to the cores other processes leave free:
    all `cores` when the machine is otherwise idle, one (the calling thread alone) when
    other processes hold the others. TVM splits a parallel loop statically, one share per
    thread, and its caller waits for every share: a worker that gets no core makes the
    kernel wait a scheduler slice (resnet_mini built with parallel convs: 1.5-1.9x its serial time
    at load 6 on 2 cores), where onnxruntime's caller runs the shares no worker started.
    The same idea as libgomp's OMP_DYNAMIC, which sizes teams by the load average; here
    the busy time other processes had (/proc/stat, less this process's own CPU time) over
    the last CHECK_INTERVAL_S."""

    def __init__(self, cores: int, stat_path: Path = PROC_STAT, resize=None):
        self.cores = cores
        self.threads = cores  # what TVM's pool starts with (TVM_NUM_THREADS)
        self._stat_path = stat_path
        self._resize = resize or _resize_pool
        self._cpus = _affinity()
        self._last = self._sample()
        self._grow_since: float | None = None  # since when more threads were wanted

    def _sample(self) -> tuple[float, float, int, int] | None:
        busy_total = _busy_ticks(self._stat_path, self._cpus)
        return None if busy_total is None else (time.monotonic(), time.process_time(), *busy_total)

    def others_busy_cores(self) -> float | None:
        """Cores other processes kept busy since the last look (None: too soon, or no
        /proc/stat); the look becomes the next one's start."""
        if self._last is None or time.monotonic() - self._last[0] < CHECK_INTERVAL_S:
            return None
        sample = self._sample()
        if sample is None:
            return None
        (wall0, cpu0, busy0, total0), (wall1, cpu1, busy1, total1) = self._last, sample
        self._last = sample
        if total1 <= total0:
            return None
        machine = (busy1 - busy0) / (total1 - total0) * len(self._cpus)  # cores busy in all
        return max(0.0, machine - (cpu1 - cpu0) / (wall1 - wall0))

    def choose(self, others_busy: float) -> int:
        """Threads for the CPUs others leave (of the affinity mask's), at most `cores` (a
        quota may allow fewer): all of them on 2 cores when others use under half a core."""
        return max(1, min(self.cores, int(len(self._cpus) - others_busy + 0.5)))

    def before_call(self) -> None:
        """Resize the calling thread's pool when the machine changed (looked at every
        CHECK_INTERVAL_S at most): fewer threads at once, more once the cores have been
        free for GROW_AFTER_S."""
        if self.cores < 2:
            return
        others = self.others_busy_cores()
        if others is None:
            return
        threads = self.choose(others)
        if threads > self.threads:
            now = time.monotonic()
            self._grow_since = self._grow_since or now
            if now - self._grow_since < GROW_AFTER_S:
                return
        self._grow_since = None
        if threads != self.threads:
            self._resize(threads)
            self.threads = threads


def _resize_pool(threads: int) -> None:
    import tvm_ffi

    tvm_ffi.get_global_func("runtime.config_threadpool")(_AFFINITY_MODE_BIG, threads)


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _busy_ticks(stat_path: Path, cpus: list[int]) -> tuple[int, int] | None:
    """Busy and total ticks of `cpus` since boot (/proc/stat's cpuN lines: user nice system
    idle iowait irq softirq steal; idle and iowait are not busy)."""
    try:
        lines = stat_path.read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{cpu}" for cpu in cpus}
    busy = total = 0
    for line in lines:
        fields = line.split()
        if fields and fields[0] in wanted:
            ticks = [int(v) for v in fields[1:9]]
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4]
    return (busy, total) if total else None
