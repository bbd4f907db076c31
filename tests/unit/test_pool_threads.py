"""The parallel host path: a convolution big enough for a parallel loop
(compiler/host/defaults.py, runs_in_parallel) computes what onnxruntime computes on 2
threads and on 1, and TVM's pool follows the cores other processes leave free
(targets/host_cores.py, PoolThreads: /proc/stat's busy ticks less this process's CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler import compile_model
from vpuc.compiler.host import build, defaults
from vpuc.targets import host_cores, load_target
from vpuc.targets.host_cores import CHECK_INTERVAL_S, GROW_AFTER_S, PoolThreads


def _conv_model(channels: int, size: int):
    """3x3 conv (padding 1) + bias + relu, channels -> channels, size x size."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.1
    bias = rng.standard_normal(channels).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


RUN = textwrap.dedent(
    """
    import json, sys, numpy as np, tvm_ffi
    from vpuc.runtime.executor import Executable
    run = Executable.load(sys.argv[1])
    x = np.load(sys.argv[2])
    y = run.run({"x": x})["y"]
    np.save(sys.argv[3], y)
    print(json.dumps({"threads": tvm_ffi.get_global_func("runtime.NumThreads")()}))
    """
)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores for 2 threads")
def test_a_conv_on_the_parallel_path_computes_what_onnxruntime_computes(tmp_path, monkeypatch):
    """64 -> 64 channels at 64x64: 151M MACs, past the 2^24 = 16.8M that makes a loop
    parallel."""
    decisions = []

    def recorded(macs, outer_extent, options):
        decisions.append((macs, defaults.runs_in_parallel.__wrapped__(macs, outer_extent, options)))
        return decisions[-1][1]

    recorded.__wrapped__ = defaults.runs_in_parallel
    monkeypatch.setattr(defaults, "runs_in_parallel", recorded)
    monkeypatch.setattr(build, "_BUILT", {})  # schedule again, not a module built earlier
    toml = tmp_path / "two.toml"
    toml.write_text('[target]\nname = "two"\nkind = "cpu"\n[host]\nkind = "llvm"\nnum-cores = 2\n')
    model = _conv_model(64, 64)
    artifact = compile_model(model, target=load_target(toml))
    assert (64 * 64 * 64 * 64 * 9, True) in decisions  # the conv's block took the parallel loop
    path = artifact.save(tmp_path / "conv.vpub")

    x = np.random.default_rng(4).standard_normal((1, 64, 64, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    for threads in (2, 1):  # the user's TVM_NUM_THREADS: the pool exactly that size
        env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
        out = tmp_path / f"y{threads}.npy"
        done = subprocess.run(
            [sys.executable, "-c", RUN, str(path), str(tmp_path / "x.npy"), str(out)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(done.stdout.splitlines()[-1])["threads"] == threads
        np.testing.assert_allclose(np.load(out), expected, rtol=1e-4, atol=1e-4)


def _stat(path, busy_idle: dict[int, tuple[int, int]]) -> None:
    """A /proc/stat with the given (busy, idle) ticks per CPU (busy all as user time)."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{cpu} {busy} 0 0 {idle} 0 0 0 0 0 0" for cpu, (busy, idle) in busy_idle.items()]
    path.write_text("\n".join(lines) + "\nintr 0\n")


@pytest.mark.parametrize(
    ("busy_ticks", "others", "threads"),
    [
        ((0, 0), 0.0, 2),  # an idle machine: both cores
        ((50, 0), 1.0, 1),  # one core busy all the interval: the caller alone
        ((50, 50), 2.0, 1),
        ((10, 0), 0.2, 2),  # under half a core: both
        ((20, 10), 0.6, 1),
    ],
)
def test_the_pool_takes_the_cores_other_processes_leave(tmp_path, monkeypatch, busy_ticks, others, threads):
    """Each CPU gains 50 ticks in the interval; `busy_ticks` of them busy. This process
    sleeps meanwhile (its own CPU time, subtracted, is about 0)."""
    monkeypatch.setattr(host_cores, "_affinity", lambda: [0, 1])
    stat = tmp_path / "stat"
    _stat(stat, {0: (100, 900), 1: (100, 900)})
    pool = PoolThreads(2, stat_path=stat)
    assert pool.others_busy_cores() is None  # too soon: no interval to measure yet
    time.sleep(CHECK_INTERVAL_S)
    _stat(stat, {cpu: (100 + busy, 900 + 50 - busy) for cpu, busy in enumerate(busy_ticks)})
    measured = pool.others_busy_cores()
    assert measured == pytest.approx(others, abs=0.1)
    assert pool.choose(measured) == threads


def test_the_pool_is_resized_only_when_vpuc_chose_its_size(monkeypatch):
    """The user's TVM_NUM_THREADS is kept (no PoolThreads); a count vpuc set is returned
    again to a later caller (bench/cpu_vs_ort.py sets it before TVM starts, Executable asks).
    The workers' spin is bounded unless the user chose it (1000 sched_yields, not TVM's 300000)."""
    monkeypatch.setattr(host_cores, "_cores_set", None)
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    monkeypatch.setenv("TVM_THREAD_POOL_SPIN_COUNT", "7")
    assert host_cores.use_available_cores() is None
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "7"
    monkeypatch.delenv("TVM_THREAD_POOL_SPIN_COUNT")
    monkeypatch.delenv("TVM_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = host_cores.use_available_cores()
    assert cores == host_cores.available_cores() and os.environ["TVM_NUM_THREADS"] == str(cores)
    assert os.environ["TVM_THREAD_POOL_SPIN_COUNT"] == "1000"
    assert host_cores.use_available_cores() == cores


def test_the_pool_shrinks_at_once_and_grows_after_the_cores_stayed_free(tmp_path, monkeypatch):
    """One busy look: one thread. Free looks: two threads only once the cores have been
    free GROW_AFTER_S (a busy look in between starts the wait again). A clock of our own:
    each look CHECK_INTERVAL_S after the last, this process using no CPU."""
    clock = [1000.0]
    monkeypatch.setattr(
        host_cores, "time", SimpleNamespace(monotonic=lambda: clock[0], process_time=lambda: 0.0)
    )
    monkeypatch.setattr(host_cores, "_affinity", lambda: [0, 1])
    stat = tmp_path / "stat"
    ticks = {0: (100, 900), 1: (100, 900)}
    _stat(stat, ticks)
    resized = []
    pool = PoolThreads(2, stat_path=stat, resize=resized.append)

    def look(busy_cpu0: int) -> None:  # an interval of 50 ticks a CPU, cpu0 busy this many
        clock[0] += CHECK_INTERVAL_S
        busy, idle = ticks[0]
        ticks[0] = (busy + busy_cpu0, idle + 50 - busy_cpu0)
        ticks[1] = (ticks[1][0], ticks[1][1] + 50)
        _stat(stat, ticks)
        pool.before_call()

    look(50)
    assert resized == [1] and pool.threads == 1
    look(0)
    look(50)  # busy again: the wait starts over
    looks = round(GROW_AFTER_S / CHECK_INTERVAL_S)  # 4: the first free look, 3 more
    for _ in range(looks):
        look(0)
    assert resized == [1]  # free for GROW_AFTER_S - CHECK_INTERVAL_S since the first free look
    look(0)
    assert resized == [1, 2] and pool.threads == 2
