"""`vpuc calibrate-host`: fit the partitioner's host CPU figures to this machine.

The partitioner's CPU cost model (compiler/partition/cost.py, docs/partition.md) prices one
host op at

    op_overhead_cycles + macs / macs_per_cycle + bytes moved / bytes_per_cycle

cycles at host.clock_mhz. This command measures our own compiled kernels instead of
guessing those three figures: a fixed set of single-op ONNX models (convolutions 1x1, 3x3
and depthwise, matrix products, elementwise ops, pooling) at several sizes is compiled by
vpuc for the target (its [host] section: the same default schedules, or the tuning
database's records with --db), each timed by TVM's time_evaluator in the VM (median of
REPEATS), and the model's features for each op (macs, bytes moved) come from cost.py
itself. A least-squares fit with non-negative terms on relative error gives the three
figures, printed as a [host] table to paste into the target TOML.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from vpuc.targets import HostOptions, Target, resolve_target
from vpuc.targets.ops import OpView

REPEATS = 20
F32 = "float32"
BIG = 1 << 40  # a figure so large that its term vanishes (reads one term of cost.py)


@dataclass(frozen=True)
class Probe:
    """One single-op model and the op as the partitioner's cost model sees it."""

    name: str
    model: onnx.ModelProto
    view: OpView


@dataclass
class Calibration:
    clock_mhz: int
    macs_per_cycle: int
    bytes_per_cycle: int
    op_overhead_cycles: int
    rows: list[dict[str, Any]]
    median_error: float  # median |predicted - measured| / measured over the probes

    def toml(self) -> str:
        return (
            "[host]\n"
            f"clock_mhz = {self.clock_mhz}\n"
            f"macs_per_cycle = {self.macs_per_cycle}\n"
            f"bytes_per_cycle = {self.bytes_per_cycle}\n"
            f"op_overhead_cycles = {self.op_overhead_cycles}\n"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "host": {"clock_mhz": self.clock_mhz, "macs_per_cycle": self.macs_per_cycle,
                     "bytes_per_cycle": self.bytes_per_cycle, "op_overhead_cycles": self.op_overhead_cycles},
            "median_relative_error": round(self.median_error, 3), "probes": self.rows,
        }  # fmt: skip


def _model(name: str, node: onnx.NodeProto, inputs, output, weights=()) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        helper.make_tensor(
            w_name, TensorProto.FLOAT, shape, rng.standard_normal(shape).astype(np.float32).ravel()
        )
        for w_name, shape in weights
    ]
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def probes() -> list[Probe]:
    """The single-op models: sizes from the zoo's and small real CNNs' layers."""
    out: list[Probe] = []
    for (c, k, hw, kernel, groups) in [
        (8, 16, 32, 3, 1), (16, 32, 16, 3, 1), (32, 64, 8, 3, 1), (64, 64, 16, 3, 1), (16, 32, 32, 1, 1),
        (64, 128, 8, 1, 1), (32, 32, 32, 3, 32), (64, 64, 16, 3, 64), (128, 128, 8, 3, 128),
    ]:  # fmt: skip
        pad = kernel // 2
        w = (k, c // groups, kernel, kernel)
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[kernel, kernel],
                                pads=[pad] * 4, group=groups)  # fmt: skip
        attrs = {"kernel": (kernel, kernel), "groups": groups, "in_channels": c, "out_channels": k}
        x_shape, y_shape = (1, c, hw, hw), (1, k, hw, hw)
        view = OpView("conv2d", "conv", ((x_shape, F32), (w, F32)), (y_shape, F32), (False, True), attrs)
        name = f"conv{kernel}x{kernel}_g{groups}_{c}x{hw}x{hw}_to_{k}"
        out.append(
            Probe(name, _model(name, node, [("x", [1, c, hw, hw])], ("y", [1, k, hw, hw]), [("w", w)]), view)
        )
    for m, kdim, n in [(1, 256, 256), (16, 64, 64), (32, 128, 128), (64, 256, 256), (1, 1024, 512)]:
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        inputs = (((m, kdim), F32), ((kdim, n), F32))
        view = OpView("dense", "matmul", inputs, ((m, n), F32), (False, True), {"out_channels": n})
        name = f"matmul_{m}x{kdim}x{n}"
        out.append(
            Probe(name, _model(name, node, [("x", [m, kdim])], ("y", [m, n]), [("w", (kdim, n))]), view)
        )
    for (op, kind), (c, hw) in itertools.product(
        (("Relu", "relu"), ("Add", "add")), ((8, 16), (32, 32), (64, 64))
    ):
        shape = (1, c, hw, hw)
        names = ["x", "x"] if op == "Add" else ["x"]
        node = helper.make_node(op, names, ["y"])
        view = OpView(kind, op.lower(), tuple((shape, "float32") for _ in names), (shape, "float32"))
        name = f"{kind}_{c}x{hw}x{hw}"
        out.append(Probe(name, _model(name, node, [("x", list(shape))], ("y", list(shape))), view))
    for c, hw in ((16, 32), (64, 16)):
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
        out_shape = (1, c, hw // 2, hw // 2)
        view = OpView(
            "max_pool2d", "pool", (((1, c, hw, hw), F32),), (out_shape, F32), attrs={"pool": (2, 2)}
        )
        name = f"maxpool2x2_{c}x{hw}x{hw}"
        out.append(
            Probe(name, _model(name, node, [("x", [1, c, hw, hw])], ("y", [1, c, hw // 2, hw // 2])), view)
        )
    return out


def _features(view: OpView, target: Target) -> tuple[float, float]:
    """(macs, bytes moved) of an op as cost.cpu_cycles counts them: read off the model
    itself by setting the other figures so large that their terms vanish."""
    from vpuc.compiler.partition.cost import cpu_cycles

    def cycles(**figures) -> int:
        return cpu_cycles(view, replace(target, host=replace(target.host, op_overhead_cycles=0, **figures)))

    return float(cycles(macs_per_cycle=1, bytes_per_cycle=BIG)), float(
        cycles(macs_per_cycle=BIG, bytes_per_cycle=1)
    )


def _measure(probe: Probe, target: Target, tuning_db: str | Path | None) -> float:
    """Median seconds of the op's compiled host graph, timed inside the VM."""
    import tempfile

    import tvm
    from tvm import relax

    from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model

    artifact = build_artifact(probe.model, prepare_model(probe.model, target, CompileOptions()), tuning_db)
    with tempfile.TemporaryDirectory(prefix="vpuc-calibrate-") as work:
        path = Path(work) / "host.so"
        path.write_bytes(artifact.members["host.so"])
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
        rng = np.random.default_rng(0)
        args = [
            tvm.runtime.tensor(rng.standard_normal(spec["shape"]).astype(np.float32))
            for spec in artifact.inputs
        ]
        timer = vm.time_evaluator("main", tvm.cpu(), number=10, repeat=REPEATS)
        return float(np.median(timer(*args).results))


def fit(target: str | Path | Target = "cpu", tuning_db: str | Path | None = None) -> Calibration:
    """Measure every probe and fit the three figures."""
    target = resolve_target(target)
    clock_hz = target.host.clock_mhz * 1e6
    rows, features, measured = [], [], []
    for probe in probes():
        seconds = _measure(probe, target, tuning_db)
        macs, moved = _features(probe.view, target)
        features.append((1.0, macs, moved))
        measured.append(seconds * clock_hz)
        rows.append(
            {"probe": probe.name, "macs": int(macs), "bytes": int(moved), "measured_us": seconds * 1e6}
        )
    overhead, cycles_per_mac, cycles_per_byte = _nonnegative_fit(np.array(features), np.array(measured))
    host = HostOptions(
        clock_mhz=target.host.clock_mhz,
        macs_per_cycle=_figure(cycles_per_mac),
        bytes_per_cycle=_figure(cycles_per_byte),
        op_overhead_cycles=round(overhead),
    )
    fitted = replace(target, host=replace(target.host, macs_per_cycle=host.macs_per_cycle,
                                          bytes_per_cycle=host.bytes_per_cycle,
                                          op_overhead_cycles=host.op_overhead_cycles))  # fmt: skip
    from vpuc.compiler.partition.cost import cpu_cycles

    errors = []
    for row, probe in zip(rows, probes(), strict=True):
        predicted_us = cpu_cycles(probe.view, fitted) / clock_hz * 1e6
        row["predicted_us"] = round(predicted_us, 2)
        row["measured_us"] = round(row["measured_us"], 2)
        errors.append(abs(predicted_us - row["measured_us"]) / row["measured_us"])
    return Calibration(host.clock_mhz, host.macs_per_cycle, host.bytes_per_cycle, host.op_overhead_cycles,
                       rows, float(np.median(errors)))  # fmt: skip


def _figure(cycles_per_unit: float) -> int:
    """A per-cycle figure (integer in the TOML) from a fitted cycles-per-unit slope."""
    return max(1, min(1 << 16, round(1.0 / cycles_per_unit))) if cycles_per_unit > 0 else 1 << 16


def _nonnegative_fit(features: np.ndarray, measured: np.ndarray) -> tuple[float, float, float]:
    """min sum ((features @ x - measured) / measured)^2 with x >= 0: relative error, so
    the small ops count as much as the large; the non-negative set is found by trying
    every subset of free terms (three terms: eight subsets)."""
    weighted = features / measured[:, None]
    target = np.ones_like(measured)
    best, best_loss = np.zeros(3), np.inf
    for mask in itertools.product((False, True), repeat=3):
        if not any(mask):
            continue
        columns = [i for i in range(3) if mask[i]]
        solution, *_ = np.linalg.lstsq(weighted[:, columns], target, rcond=None)
        if np.any(solution < 0):
            continue
        x = np.zeros(3)
        x[columns] = solution
        loss = float(np.sum((weighted @ x - target) ** 2))
        if loss < best_loss:
            best, best_loss = x, loss
    return float(best[0]), float(best[1]), float(best[2])
