"""Benchmark: the product's main job, end to end, per zoo model and target.

Compiles each zoo model as `vpuc compile` does, saves and loads the artifact, runs it once
(host graph on TVM's VM, every VPU call on the simulator) and reports: simulated VPU
cycles, host-link cycles, host milliseconds, the compile-time estimate over the simulated
cycles (goal: within 10%), and the simulator's wall time over the numpy floor for the same
integer work (every VPU layer computed on whole tensors with numpy's fastest exact
products, as bench/sim_speed.py does for ResNet-18; goal <= 2 on every zoo model).

    python bench/e2e.py [--targets vpu,vpu-plus] [--models a,b] [--repeat 5]

Writes bench/out/e2e.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread for both sides
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import write_json
from numpy.lib.stride_tricks import sliding_window_view
from rich.console import Console
from rich.table import Table

from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower import vpu_functions
from vpuc.compiler.lower.reader.extract import extract_subgraph
from vpuc.examples import zoo
from vpuc.runtime import load
from vpuc.sim import Simulator

# --- the numpy floor: every layer on whole tensors -------------------------------------------


def _matmul_exact(cols: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """int32 cols @ weights.T of int8 values via float32 products in blocks of 1023 taps."""
    cols, weights = cols.astype(np.float32), weights.astype(np.float32).T
    acc = np.zeros((cols.shape[0], weights.shape[1]), np.int32)
    for k in range(0, cols.shape[1], 1023):
        acc += (cols[:, k : k + 1023] @ weights[k : k + 1023]).astype(np.int32)
    return acc


def _requant(acc, requant: vops.Requantize):
    y = acc.astype(np.float32) * requant.multipliers
    return np.clip(np.rint(y) + np.float32(requant.zero_point), *requant.clamp).astype(np.int8)


def _conv(op, x):
    n, h, w, c = x.shape
    if isinstance(op, vops.Dense):
        cols = x.reshape(-1, c).astype(np.int32) - op.in_q[0].zero_point
        return _requant(_matmul_exact(cols, op.weights) + op.bias, op.requant)
    (kh, kw), (sh, sw), (dh, dw) = op.kernel, op.strides, op.dilation
    top, left, bottom, right = op.padding
    pads = ((0, 0), (top, bottom), (left, right), (0, 0))
    padded = np.pad(x, pads, constant_values=op.in_q[0].zero_point)
    windows = sliding_window_view(padded, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    windows = windows[:, ::sh, ::sw, :, ::dh, ::dw]  # n, oh, ow, c, kh, kw
    oh, ow = windows.shape[1:3]
    g = op.groups
    cols = windows.transpose(0, 1, 2, 4, 5, 3).reshape(n * oh * ow, kh, kw, g, c // g)
    outs = []
    weights = op.weights.reshape(g, -1, kh, kw, c // g)
    for group in range(g):
        part = cols[:, :, :, group].reshape(n * oh * ow, -1).astype(np.int32) - op.in_q[0].zero_point
        outs.append(_matmul_exact(part, weights[group].reshape(weights.shape[1], -1)))
    acc = np.concatenate(outs, axis=1) + op.bias
    return _requant(acc, op.requant).reshape(n, oh, ow, -1)


def numpy_floor(subgraph: vops.Subgraph, inputs: dict) -> None:
    values = {**inputs, **subgraph.constants}
    for op in subgraph.ops:
        args = [values[a].reshape(subgraph.tensors[a].nhwc) for a in op.inputs]
        shape = subgraph.tensors[op.output].shape
        if isinstance(op, vops.Conv | vops.Dense):
            out = _conv(op, args[0])
        elif isinstance(op, vops.Pool):
            x = args[0].astype(np.int32)
            win = sliding_window_view(x, op.kernel, axis=(1, 2))[:, :: op.strides[0], :: op.strides[1]]
            out = win.max(axis=(-2, -1)) if op.mode == "max" else win.mean(axis=(-2, -1))
        elif isinstance(op, vops.Add | vops.Rescale):
            out = args[0].astype(np.float32) * np.float32(0.5) + args[-1].astype(np.float32)
        elif isinstance(op, vops.Mul):
            out = args[0].astype(np.int32) * args[1].reshape(-1 if op.broadcast else args[0].shape)
        elif isinstance(op, vops.Lut):
            out = op.table[args[0].astype(np.int32) + 128]
        else:
            out = args[0]
        values[op.output] = np.resize(np.asarray(out).astype(np.int8), shape)


# --- the bench ----------------------------------------------------------------------------------


def measure(name: str, target: str, workdir: Path, repeat: int) -> dict:
    zoo.write_zoo(workdir, [name])
    model = workdir / f"{name}.onnx"
    prepared = prepare_model(model, target, CompileOptions(calib_synthetic=8))
    artifact = build_artifact(model, prepared, reference=False).save(workdir / f"{name}.{target}.vpub")
    executable = load(artifact)
    spec = executable.inputs[0]
    x = np.random.default_rng(0).standard_normal(spec["shape"]).astype(spec["dtype"])
    executable.run(
        {s["name"]: x if s is spec else np.zeros(s["shape"], s["dtype"]) for s in executable.inputs}
    )
    stats = executable.last_run
    estimate = sum(p.estimate["cycles"] for p in prepared.programs)
    sim_s = floor_s = 0.0
    for program in prepared.programs:
        func = vpu_functions(prepared.partition.mod)[program.index][1]
        subgraph = extract_subgraph(func, program.symbol, prepared.quantized.provenance, program.index)
        rng = np.random.default_rng(1)
        inputs = {b.name: rng.integers(-128, 128, b.shape).astype(np.int8) for b in program.inputs}
        image = np.zeros(program.dram_bytes, np.uint8)
        image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
        for b in program.inputs:
            image[b.dram_address : b.dram_address + inputs[b.name].size] = (
                inputs[b.name].reshape(-1).view(np.uint8)
            )
        simulator = Simulator(prepared.target, dram_bytes=program.dram_bytes)
        sim_s += _median(lambda s=simulator, p=program.program, i=image: s.run(p, i), repeat)
        floor_s += _median(lambda g=subgraph, x=inputs: numpy_floor(g, x), repeat)
    return {
        "target": target,
        "vpu_cycles": stats.cycles["vpu"],
        "link_cycles": stats.cycles["link"],
        "host_ms": round(stats.host_ms, 3),
        "estimate_cycles": estimate,
        "estimate_over_simulated": round(estimate / max(1, stats.cycles["vpu"]), 3),
        "sim_wall_s": round(sim_s, 5),
        "numpy_floor_s": round(floor_s, 5),
        "sim_over_numpy": round(sim_s / floor_s, 2) if floor_s else None,
        "instructions": sum(len(p.program) for p in prepared.programs),
    }


def _median(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="vpu,vpu-plus")
    parser.add_argument("--models", default=",".join(zoo.MODELS))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.targets.split(","):
            for name in args.models.split(","):
                rows[f"{name}@{target}"] = {"model": name, **measure(name, target, Path(tmp), args.repeat)}
    console = Console(width=200 if not sys.stdout.isatty() else None)
    table = Table(title="End to end: one run per zoo model and target", title_justify="left")
    columns = {
        "model": "model", "target": "target", "VPU cycles": "vpu_cycles", "link cycles": "link_cycles",
        "host ms": "host_ms", "estimate/simulated": "estimate_over_simulated", "instructions": "instructions",
        "sim s": "sim_wall_s", "numpy s": "numpy_floor_s", "sim/numpy": "sim_over_numpy",
    }  # fmt: skip
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows.values():
        table.add_row(*(str(row[key]) for key in columns.values()))
    console.print(table)
    console.print(f"wrote {write_json('e2e', {'runs': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
