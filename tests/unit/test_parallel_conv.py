"""A conv above PARALLEL_MIN_MACS (compiler/host/defaults.py) compiled for the CPU runs its
fused outer loop in parallel chunks; run on two threads it computes what onnxruntime
computes, and exactly what the serial build computes (each output's reduction runs in the
same order on either thread), in float and with int8 QDQ tensors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler import compile_model
from vpuc.compiler.host import build, defaults
from vpuc.examples import zoo

CHANNELS, SIZE = 32, 32  # 3x3, padding 1: 9.4M MACs
MACS = CHANNELS * CHANNELS * SIZE * SIZE * 9

RUN = textwrap.dedent(
    """
    import sys, numpy as np, tvm_ffi
    from vpuc.targets import host_cores
    host_cores.FreeCores.idle_cores = lambda self: 0.0  # the pool's threads when the user sets none
    from vpuc.runtime.executor import Executable
    run = Executable.load(sys.argv[1])
    out = run.run({sys.argv[4]: np.load(sys.argv[2])})
    np.save(sys.argv[3], out[sys.argv[5]])
    print(tvm_ffi.get_global_func("runtime.NumThreads")())
    """
)


def _conv_model(qdq: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((CHANNELS, CHANNELS, 3, 3)) * 0.1).astype(np.float32)
    bias = (rng.standard_normal(CHANNELS) * 0.1).astype(np.float32)
    shape = [1, CHANNELS, SIZE, SIZE]
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    nodes = [
        helper.make_node("Conv", ["xc", "wc", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
    ]
    if qdq:  # activations and weights through int8 (x scale 1/32, weights 1/256, output 1/16)
        wq = np.clip(np.round(weight * 256), -127, 127).astype(np.int8)
        inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(1 / 256, np.float32), "ws"),
                 numpy_helper.from_array((bias * 32 * 256).round().astype(np.int32), "bq"),
                 numpy_helper.from_array(np.array(1 / 32 / 256, np.float32), "bs"),
                 numpy_helper.from_array(np.array(1 / 32, np.float32), "xs"),
                 numpy_helper.from_array(np.array(1 / 16, np.float32), "ys"),
                 numpy_helper.from_array(np.array(0, np.int8), "z"), numpy_helper.from_array(np.array(0, np.int32), "z32")]  # fmt: skip
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "xs", "z"], ["xq"]),
            helper.make_node("DequantizeLinear", ["xq", "xs", "z"], ["xc"]),
            helper.make_node("DequantizeLinear", ["wq", "ws", "z"], ["wc"]),
            helper.make_node("DequantizeLinear", ["bq", "bs", "z32"], ["b"]),
            *nodes,
            helper.make_node("QuantizeLinear", ["r", "ys", "z"], ["yq"]),
            helper.make_node("DequantizeLinear", ["yq", "ys", "z"], ["y"]),
        ]
    else:
        nodes = [helper.make_node("Identity", ["x"], ["xc"]), helper.make_node("Identity", ["w"], ["wc"]), *nodes,
                 helper.make_node("Identity", ["r"], ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run_on_threads(
    artifact, x: np.ndarray, tmp_path, name: str, threads: int = 2, io=("x", "y")
) -> np.ndarray:
    """On a pool of two threads (the user's TVM_NUM_THREADS), or of two with one in use: the
    pool following a load that leaves no core idle (targets/host_cores.py, PoolFollower)."""
    path = artifact.save(tmp_path / f"{name}.vpub")
    np.save(tmp_path / "x.npy", x)
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    env |= {"TVM_NUM_THREADS": "2"} if threads == 2 else {}
    done = subprocess.run([sys.executable, "-c", RUN, str(path), str(tmp_path / "x.npy"), str(tmp_path / f"{name}.npy"), *io],
                          env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.split()[-1] == str(threads)
    return np.load(tmp_path / f"{name}.npy")


def _parallel_and_serial(model, monkeypatch):
    """The model built with its convs parallel as the defaults choose (PARALLEL_MIN_MACS as
    the caller left it), then with every conv serial; no host library of an earlier build
    in this process reused."""
    monkeypatch.setattr(build, "_BUILT", {})
    parallel = compile_model(model, target="cpu")
    monkeypatch.setattr(defaults, "PARALLEL_MIN_MACS", 1 << 62)
    monkeypatch.setattr(build, "_BUILT", {})
    return parallel, compile_model(model, target="cpu")


def _onnxruntime(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]


@pytest.mark.parametrize("qdq", [False, True], ids=["float", "int8"])
def test_a_parallel_conv_matches_onnxruntime_and_the_serial_build(qdq, tmp_path, monkeypatch):
    monkeypatch.setattr(defaults, "PARALLEL_MIN_MACS", 1 << 20)  # below MACS: the parallel path
    model = _conv_model(qdq)
    x = (np.random.default_rng(1).standard_normal((1, CHANNELS, SIZE, SIZE)) * 2).astype(np.float32)
    parallel, serial = _parallel_and_serial(model, monkeypatch)
    expected = _onnxruntime(model, {"x": x})

    got = _run_on_threads(parallel, x, tmp_path, "parallel")
    if qdq:  # on the output's int8 grid (1/16), at most one step from onnxruntime's rounding
        assert np.abs(got - expected).max() <= 1 / 16 + 1e-6
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert np.array_equal(got, _run_on_threads(serial, x, tmp_path, "serial"))
    if len(os.sched_getaffinity(0)) >= 2:  # the parallel build's chunks in turn on one thread
        assert np.array_equal(got, _run_on_threads(parallel, x, tmp_path, "parallel1", threads=1))


def test_resnet_mini_on_two_threads_matches_onnxruntime_and_the_serial_build(tmp_path, monkeypatch):
    """Its six 1.2-2.4M-MAC convs parallel (chunks over rows, each padding its own rows:
    strides 1 and 2, residual epilogues), its stem and 1x1 projections serial."""
    model = zoo.build("resnet_mini")
    x = zoo.sample_inputs(model, seed=0)["input"]
    parallel, serial = _parallel_and_serial(model, monkeypatch)
    expected = _onnxruntime(model, {"input": x})
    io = ("input", "logits")
    got = _run_on_threads(parallel, x, tmp_path, "parallel", io=io)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert np.array_equal(got, _run_on_threads(serial, x, tmp_path, "serial", io=io))
    if len(os.sched_getaffinity(0)) >= 2:
        assert np.array_equal(got, _run_on_threads(parallel, x, tmp_path, "parallel1", threads=1, io=io))
