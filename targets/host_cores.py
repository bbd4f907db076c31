"""The cores this process may compute on, and TVM's thread pool sized to them.

    available_cores()   the CPUs of the process's affinity mask (taskset, a cpuset cgroup),
                        fewer when a CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us)
                        allows less: a container given 1.5 CPUs of a 64-core machine
                        computes on 2 threads, not 64
    use_available_cores()  TVM_NUM_THREADS set to that count unless the user set it (or
                        OMP_NUM_THREADS, which TVM also reads)

Left alone, TVM 0.27's runtime sizes its pool to std::thread::hardware_concurrency() / 2 on
x86 (it assumes two hyper-threads per core): 1 thread on a 2-core machine without SMT, and
on a machine with many cores it ignores both the affinity mask and the quota, so a process
confined to 1 core would start many threads that take turns on it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

THREAD_VARIABLES = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")  # what TVM's runtime reads, in order
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
    variable once. The count set, or None when the user's variable was kept."""
    if any(os.environ.get(name) for name in THREAD_VARIABLES):
        return None
    cores = available_cores()
    os.environ["TVM_NUM_THREADS"] = str(cores)
    return cores
