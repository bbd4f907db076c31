"""Threads on the host CPU path: which default schedules get a parallel loop
(compiler/host/defaults.py, PARALLEL_MIN_MACS), how many cores the process may use
(targets/host_cores.py: affinity mask and cgroup CPU quota), and the size of TVM's thread
pool behind `Executable` (the cores available, not TVM's hardware_concurrency() / 2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from tvm import te, topi

from vpuc.compiler.host.defaults import PARALLEL_MIN_MACS, ScheduleOptions, default_schedule
from vpuc.targets.host_cores import available_cores, cgroup_cpu_quota


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


POOL = textwrap.dedent(
    """
    import sys, numpy as np, tvm_ffi
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


def _pool_threads(artifact, prefix=(), **env) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    command = [*prefix, sys.executable, "-c", POOL, str(artifact)]
    done = subprocess.run(command, env={**clean, **env}, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to tell 1 from all")
def test_the_runtime_pool_has_the_available_cores_and_the_users_count_wins(relu_artifact):
    assert _pool_threads(relu_artifact) == available_cores()
    assert _pool_threads(relu_artifact, TVM_NUM_THREADS="1") == 1
    if shutil.which("taskset"):  # a process confined to one core starts one thread, not more
        assert _pool_threads(relu_artifact, prefix=("taskset", "-c", "0")) == 1
