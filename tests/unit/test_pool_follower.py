"""TVM's pool follows the load (targets/host_cores.py): PoolFollower re-decides, between
runs, how many of the pool's threads a parallel kernel uses from /proc/stat windows, and
sets TVM's pool to it once per change (per calling thread: TVM's pool is thread-local); a
user's TVM_NUM_THREADS above the process's CPUs is capped to them with one warning line.
Expected counts are worked by hand from the /proc/stat lines written here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

from vpuc.targets import host_cores
from vpuc.targets.host_cores import FreeCores, PoolFollower, cap_user_threads

# cpuN user nice system idle iowait ...: each window below is 100 ticks per CPU (1 s at 100 Hz)
START = "cpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n"
LINES = {
    "one core busy": "cpu0 90 0 0 10 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0\n",  # 0.9 core busy: 1.1 idle
    "idle": "cpu0 95 0 0 105 0 0 0 0\ncpu1 0 0 5 195 0 0 0 0\n",  # then 5 + 5 busy ticks: 1.9 idle
    "a nice loop": "cpu0 95 100 0 105 0 0 0 0\ncpu1 0 0 5 295 0 0 0 0\n",  # 100 nice ticks: 1.0 idle
    "loaded": "cpu0 155 140 0 105 0 0 0 0\ncpu1 80 0 25 295 0 0 0 0\n",  # 60+40 and 80+20: 0.0 idle
}


@pytest.fixture
def two_cpus(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(host_cores, "TICKS_PER_S", 100)
    stat = tmp_path / "stat"
    stat.write_text(START)
    return stat


def test_the_pool_follows_each_window_and_is_set_only_when_the_count_changes(two_cpus, monkeypatch):
    set_to: list[int] = []
    first = FreeCores(two_cpus)
    two_cpus.write_text(LINES["one core busy"])
    follower = PoolFollower(2, set_to.append, first, proc_stat=two_cpus)
    assert follower.threads == 1  # 1.1 idle cores round to 1
    assert follower.before_run() == 1 and set_to == [1]  # the first run sets the pool
    assert follower.before_run() == 1 and set_to == [1]  # within SAMPLE_S: no new window
    monkeypatch.setattr(host_cores, "SAMPLE_S", 0.0)  # from here every run closes a window
    for lines, threads, calls in [
        ("idle", 2, [1, 2]),
        ("a nice loop", 1, [1, 2, 1]),
        ("loaded", 1, [1, 2, 1]),
    ]:
        two_cpus.write_text(LINES[lines])
        assert follower.before_run() == threads, lines
        assert set_to == calls, lines  # "loaded" keeps 1 thread: the pool is not set again


def test_each_calling_thread_sets_its_own_pool(two_cpus):
    set_to: list[tuple[str, int]] = []
    follower = PoolFollower(2, lambda n: set_to.append((threading.current_thread().name, n)), FreeCores(two_cpus),
                            proc_stat=two_cpus)  # fmt: skip
    follower.before_run()
    other = threading.Thread(target=follower.before_run, name="other")
    other.start()
    other.join()
    follower.before_run()
    assert set_to == [("MainThread", 2), ("other", 2)]  # nothing busy in the first window: 2


@pytest.mark.parametrize(
    ("env", "capped", "warned"),
    [
        ({"TVM_NUM_THREADS": "20000"}, "2", "TVM_NUM_THREADS=20000"),
        ({"OMP_NUM_THREADS": "64"}, "2", "OMP_NUM_THREADS=64"),  # TVM reads it when TVM_NUM_THREADS is unset
        ({"TVM_NUM_THREADS": "2", "OMP_NUM_THREADS": "64"}, "2", None),  # TVM reads the first only
        ({"TVM_NUM_THREADS": "1"}, "1", None),
        ({}, None, None),
    ],
)
def test_a_users_thread_count_above_the_cpus_is_capped_with_one_warning(env, capped, warned, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    for name in host_cores.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    lines: list[str] = []
    cap_user_threads(lines.append)
    assert os.environ.get("TVM_NUM_THREADS") == capped
    assert os.environ.get("OMP_NUM_THREADS") == env.get("OMP_NUM_THREADS")  # left to other libraries
    assert [warned in line for line in lines] == ([True] if warned else [])


RUN = textwrap.dedent(
    """
    import os, sys, numpy as np, tvm_ffi
    from vpuc.targets import host_cores
    idle = iter(float(v) for v in sys.argv[2:])  # the idle cores of each window, in turn
    host_cores.FreeCores.idle_cores = lambda self: next(idle)
    host_cores.SAMPLE_S = 0.0
    from vpuc.runtime.executor import Executable
    run = Executable.load(sys.argv[1])
    for _ in sys.argv[3:]:
        run.run({"x": np.ones((1, 8, 8, 8), np.float32)})
        print(tvm_ffi.get_global_func("runtime.NumThreads")())
    print(len(os.listdir("/proc/self/task")), file=sys.stderr)  # the process's threads
    """
)


def _clean_env(**env) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in host_cores.THREAD_VARIABLES}
    return {**clean, **env}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to tell 1 from 2")
def test_tvms_pool_uses_the_threads_each_window_leaves(relu_artifact):
    """Windows: the library's load (2 idle cores), then one per run: 0.4, 2.0, 1.2 idle."""
    command = [sys.executable, "-c", RUN, str(relu_artifact), "2.0", "0.4", "2.0", "1.2"]
    done = subprocess.run(command, env=_clean_env(), capture_output=True, text=True, check=True)
    assert [int(n) for n in done.stdout.split()] == [1, 2, 1]


def test_a_users_thread_count_above_the_cpus_starts_that_many_threads_only(relu_artifact):
    cores = len(os.sched_getaffinity(0))
    script = RUN.replace("host_cores.FreeCores", "# ").replace("for _ in sys.argv[3:]:", "for _ in [1]:")
    done = subprocess.run([sys.executable, "-c", script, str(relu_artifact)], capture_output=True, text=True,
                          env=_clean_env(TVM_NUM_THREADS=str(cores + 62)), check=True)  # fmt: skip
    assert int(done.stdout.split()[-1]) == cores
    assert int(done.stderr.split()[-1]) < cores + 62  # TVM's pool did not start one per the variable
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"TVM_NUM_THREADS={cores + 62}" in warnings[0], done.stderr


@pytest.fixture(scope="module")
def relu_artifact(tmp_path_factory):
    from onnx import TensorProto, helper

    from vpuc.compiler import compile_model

    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 8, 8]) for n in "xy"]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", value[:1], value[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return compile_model(model, target="cpu").save(tmp_path_factory.mktemp("pool") / "relu.vpub")
