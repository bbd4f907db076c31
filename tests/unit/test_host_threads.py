"""Threads on the host CPU path: which default schedules get a parallel loop
(compiler/host/defaults.py, PARALLEL_MIN_MACS), how many cores the process may use
(targets/host_cores.py: affinity mask and cgroup CPU quota), how many of them other
processes leave idle (threads_for, FreeCores: /proc/stat less this process's own time),
and the size of TVM's thread pool behind `Executable` (that count, not TVM's
hardware_concurrency() / 2). Expected values are worked by hand from the /proc/stat
lines written here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from tvm import te, topi

from vpuc.compiler.host.defaults import PARALLEL_MIN_MACS, ScheduleOptions, default_schedule
from vpuc.targets.host_cores import (
    TICKS_PER_S,
    FreeCores,
    available_cores,
    cgroup_cpu_quota,
    cpu_ticks,
    idle_cores,
    threads_for,
)


def _conv(channels: int, size: int):
    x = te.placeholder((1, channels, size, size), name="x")
    w = te.placeholder((channels, channels, 3, 3), name="w")
    macs = channels * channels * size * size * 9
    return te.create_prim_func([x, w, topi.nn.conv2d_nchw(x, w, 1, 1, 1)]), macs


@pytest.mark.parametrize(("channels", "size"), [(16, 32), (64, 64)])
@pytest.mark.parametrize("cores", [1, 2])
def test_a_conv_runs_in_parallel_only_above_the_threshold_and_with_cores(channels, size, cores):
    func, macs = _conv(channels, size)
    script = default_schedule(func, ScheduleOptions(vector_lanes=8, num_cores=cores)).script()
    assert ("T.parallel(" in script) == (macs >= PARALLEL_MIN_MACS and cores > 1), macs


def _tree(tmp_path, files: dict[str, str], cgroup: str):
    root = tmp_path / "cgroup"
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    proc = tmp_path / "proc_cgroup"
    proc.write_text(cgroup)
    return root, proc


def test_a_cgroup_v2_quota_is_the_tightest_of_the_cgroup_and_its_parents(tmp_path):
    root, proc = _tree(
        tmp_path,
        {"cpu.max": "max 100000\n", "a/cpu.max": "250000 100000\n", "a/b/cpu.max": "150000 100000\n"},
        "0::/a/b\n",
    )
    assert cgroup_cpu_quota(root, proc) == pytest.approx(1.5)
    assert available_cores(root, proc) == min(2, len(os.sched_getaffinity(0)))
    (root / "a/b/cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(root, proc) == pytest.approx(2.5)


def test_a_cgroup_v1_quota_caps_the_cores_and_no_quota_leaves_the_affinity(tmp_path):
    root, proc = _tree(
        tmp_path,
        {"cpu,cpuacct/job/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"},
        "4:memory:/job\n2:cpu,cpuacct:/job\n",
    )
    assert cgroup_cpu_quota(root, proc) == pytest.approx(0.5)
    assert available_cores(root, proc) == 1
    (root / "cpu,cpuacct/job/cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(root, proc) is None
    assert available_cores(root, proc) == len(os.sched_getaffinity(0))


def test_threads_are_the_idle_cores_rounded_at_least_one_at_most_the_available():
    assert threads_for(2, 2.0) == 2  # idle machine
    assert threads_for(2, 1.5) == 2  # half a core busy: rounds up
    assert threads_for(2, 1.4) == 1
    assert threads_for(2, 0.9) == 1  # one busy loop (a `nice` one counts too)
    assert threads_for(2, 0.0) == 1  # load 2 and more: one thread, never none
    assert threads_for(8, 3.2) == 3
    assert threads_for(1, 2.0) == 1  # never above the cores the process may use
    assert threads_for(4, None) == 4  # nothing measured (no /proc/stat): all of them


# /proc/stat lines: cpuN user nice system idle iowait irq softirq steal guest guest_nice
BEFORE = "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 50 10 1000 5 0 0 0 0 0\ncpu1 200 0 20 900 0 0 0 0 0 0\nintr 1\n"
# over 100 ticks per CPU: cpu0 busy 80 (60 user + 20 nice), idle 20; cpu1 busy 10, idle 85, iowait 5
AFTER = "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 160 70 10 1020 5 0 0 0 0 0\ncpu1 205 0 25 985 5 0 0 0 0 0\nintr 1\n"


def test_idle_cores_are_the_window_less_what_other_processes_kept_busy():
    # busy = user + nice + system + irq + softirq + steal; idle and iowait are idle
    assert cpu_ticks(BEFORE, {0, 1}) == (380, 2285)
    assert cpu_ticks(AFTER, {0, 1}) == (470, 2485)
    assert cpu_ticks(AFTER, {1}) == (230, 1220)  # 205 + 25 busy, 985 + 5 idle
    assert cpu_ticks(AFTER, {0, 2}) is None  # a CPU the file lacks
    window_s = 100 / TICKS_PER_S  # 100 ticks per CPU
    # 90 busy ticks of 200: 2 - 0.9 idle cores; with 30 of them this process's own, 2 - 0.6
    assert idle_cores((380, 2285), (470, 2485), 2, 0.0) == pytest.approx(1.1)
    assert idle_cores((380, 2285), (470, 2485), 2, 0.3 * window_s) == pytest.approx(1.4)
    assert idle_cores((380, 2285), (470, 2485), 2, 5 * window_s) == pytest.approx(2.0)  # never above the CPUs
    assert idle_cores((380, 2285), (380, 2285), 2, 0.0) == 2.0  # no tick elapsed


def test_free_cores_reads_proc_stat_at_opening_and_at_the_end(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text(BEFORE)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    free = FreeCores(stat)
    stat.write_text(AFTER)
    idle = free.idle_cores()  # this test's own CPU time in the window (waiting 0.1 s) is small
    assert 1.1 <= idle < 1.15 and threads_for(2, idle) == 1
    assert FreeCores(tmp_path / "missing").idle_cores() is None


POOL = textwrap.dedent(
    """
    import os, sys, numpy as np, tvm_ffi
    from vpuc.targets import host_cores
    if len(sys.argv) > 2:  # the idle cores FreeCores is to see
        host_cores.FreeCores.idle_cores = lambda self: float(sys.argv[2])
    from vpuc.runtime.executor import Executable
    run = Executable.load(sys.argv[1])
    run.run({"x": np.ones((1, 8, 8, 8), np.float32)})
    print(tvm_ffi.get_global_func("runtime.NumThreads")())
    """
)


@pytest.fixture(scope="module")
def relu_artifact(tmp_path_factory):
    from onnx import TensorProto, helper

    from vpuc.compiler import compile_model

    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 8, 8]) for n in "xy"]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", value[:1], value[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return compile_model(model, target="cpu").save(tmp_path_factory.mktemp("threads") / "relu.vpub")


def _pool_threads(artifact, prefix=(), idle: float | None = None, **env) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    command = [*prefix, sys.executable, "-c", POOL, str(artifact), *([] if idle is None else [str(idle)])]
    done = subprocess.run(command, env={**clean, **env}, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to tell 1 from all")
def test_the_runtime_pool_has_the_idle_available_cores_and_the_users_count_wins(relu_artifact):
    assert _pool_threads(relu_artifact, idle=2.0) == available_cores()
    assert _pool_threads(relu_artifact, idle=0.6) == 1  # other processes keep a core and a half busy
    assert 1 <= _pool_threads(relu_artifact) <= available_cores()  # as this machine's load has it
    assert _pool_threads(relu_artifact, idle=0.0, TVM_NUM_THREADS="2") == 2  # the user's count wins
    assert _pool_threads(relu_artifact, idle=2.0, TVM_NUM_THREADS="1") == 1
    if shutil.which("taskset"):  # a process confined to one core starts one thread, not more
        assert _pool_threads(relu_artifact, prefix=("taskset", "-c", "0"), idle=2.0) == 1
