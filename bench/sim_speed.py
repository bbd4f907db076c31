"""Benchmark: how fast the simulator runs a ResNet-18-sized int8 program.

Stands apart from the compiler: the generator below tiles ResNet-18's layer sequence
(224x224x3 input, conv1, maxpool, 8 basic blocks with residual adds, global average pool,
a 1000-way dense layer) onto the target's SRAM, double-buffers every tile with tokens so
transfers overlap compute, and writes random int8 weights into a DRAM image. The simulator
runs it end to end; then numpy alone computes the same integer arithmetic on whole tensors
(one im2col and exact float32 matrix products per layer: the floor for a Python
simulator). Every layer's output must agree bit for bit.

    python bench/sim_speed.py [--target vpu] [--repeat 5]     (one BLAS thread unless
    OPENBLAS_NUM_THREADS is set)

Prints simulated MACs per wall second, instructions per second and the ratio of the
simulator's wall time to numpy's (goal <= 2); writes bench/out/sim_speed.json.
"""

from __future__ import annotations

import os

# One BLAS thread for the simulator and numpy alike: on this shared 2-core machine a second
# thread makes timings swing fivefold when another process holds a core (the simulator's
# per-tile products suffer most). Export the variables to measure otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _common import console
from resnet18_program import Layer, build_resnet18, generate_program
from rich.table import Table

from vpuc.sim import Simulator
from vpuc.targets import load_target

OUT = Path(__file__).resolve().parent / "out" / "sim_speed.json"


# --- numpy alone: the same integer arithmetic on whole tensors -----------------------------


def exact_matmul(cols: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """int32 cols @ weights.T for int8 operands: float32 products over blocks of at most
    1023 taps are exact (|sum| < 2^24), the fastest exact way numpy has."""
    cols, weights = cols.astype(np.float32), weights.astype(np.float32).T
    acc = np.zeros((cols.shape[0], weights.shape[1]), dtype=np.int32)
    for k0 in range(0, cols.shape[1], 1023):
        acc += (cols[:, k0 : k0 + 1023] @ weights[k0 : k0 + 1023]).astype(np.int32)
    return acc


def requant(acc, multiplier, zp, lo=-128):
    y = acc.astype(np.float32) * multiplier
    return np.clip(np.rint(y) + np.float32(zp), lo, 127).astype(np.int8)


def numpy_conv(x: np.ndarray, L: Layer, outputs: dict) -> np.ndarray:
    h, w, c = x.shape
    padded = np.full((h + 2 * L.pad, w + 2 * L.pad, c), L.src.zp, dtype=np.int8)
    padded[L.pad : L.pad + h, L.pad : L.pad + w] = x
    windows = np.lib.stride_tricks.sliding_window_view(padded, (L.k, L.k), axis=(0, 1))
    windows = windows[:: L.stride, :: L.stride][: L.dst.h, : L.dst.w].transpose(0, 1, 3, 4, 2)
    weights = L.weights.reshape(L.dst.c, -1)
    acc = exact_matmul(windows.reshape(L.dst.h * L.dst.w, -1), weights)
    acc += L.bias - L.src.zp * weights.sum(axis=1, dtype=np.int32)
    if not L.residual:
        return requant(acc, L.multiplier, L.dst.zp, L.dst.zp if L.relu else -128)
    y = requant(acc, L.multiplier, L.mid_zp).astype(np.float32) - np.float32(L.mid_zp)
    identity = outputs[L.residual.addr].reshape(y.shape).astype(np.float32) - np.float32(L.residual.zp)
    total = np.float32(L.scales[0]) * y + np.float32(L.scales[1]) * identity
    return np.clip(np.rint(total) + np.float32(L.dst.zp), L.dst.zp, 127).astype(np.int8)


def numpy_forward(x: np.ndarray, layers: list[Layer]) -> dict[int, np.ndarray]:
    """Every layer's output by its DRAM address."""
    outputs = {layers[0].src.addr: x}
    for L in layers:
        src = outputs[L.src.addr].reshape(L.src.h, L.src.w, L.src.c)
        if L.kind == "conv":
            y = numpy_conv(src, L, outputs)
        elif L.kind == "maxpool":
            padded = np.full((src.shape[0] + 2, src.shape[1] + 2, src.shape[2]), -128, np.int8)
            padded[1:-1, 1:-1] = src
            windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(0, 1))
            y = windows[::2, ::2][: L.dst.h, : L.dst.w].max(axis=(3, 4))
        elif L.kind == "avgpool":
            total = src.sum(axis=(0, 1), dtype=np.int32) - np.int32(L.src.zp * 49)
            y = requant(total, np.float32(L.multiplier) / np.float32(49), L.dst.zp)
        else:
            acc = exact_matmul(src.reshape(1, -1), L.weights)
            acc += L.bias - L.src.zp * L.weights.sum(axis=1, dtype=np.int32)
            y = requant(acc, L.multiplier, L.dst.zp)
        outputs[L.dst.addr] = y.reshape(-1)
    return outputs


# --- the benchmark -----------------------------------------------------------------------


def best_times(repeat: int, *runs) -> tuple[list[float], list]:
    """The fastest of `repeat` wall times of each run, alternating them so that both see the
    same machine (it is shared), and each run's last result."""
    best, results = [float("inf")] * len(runs), [None] * len(runs)
    for _ in range(repeat):
        for n, run in enumerate(runs):
            start = time.perf_counter()
            results[n] = run()
            best[n] = min(best[n], time.perf_counter() - start)
    return best, results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="vpu")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    target = load_target(args.target)
    image, x, layers = build_resnet18(np.random.default_rng(0))
    program = generate_program(layers, target.hardware.sram_bytes)
    image = np.frombuffer(bytes(image), dtype=np.uint8)
    x_array = image[x.addr : x.addr + x.h * x.w * x.c].view(np.int8)
    simulator = Simulator(target)
    (sim_s, numpy_s), (result, expected) = best_times(
        args.repeat, lambda: simulator.run(program, image), lambda: numpy_forward(x_array, layers)
    )
    for L in layers:
        got = result.dram[L.dst.addr : L.dst.addr + L.dst.h * L.dst.w * L.dst.c].view(np.int8)
        if not np.array_equal(got, expected[L.dst.addr]):
            raise SystemExit(f"sim_speed: {L.name}: the simulator and numpy disagree")
    stats = result.stats
    figures = {
        "ratio_vs_numpy": sim_s / numpy_s,
        "macs_per_s": stats.macs / sim_s,
        "instructions_per_s": stats.instructions / sim_s,
        "target": target.name,
        "blas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "sim_wall_s": sim_s,
        "numpy_wall_s": numpy_s,
        "macs": stats.macs,
        "instructions": stats.instructions,
        "simulated_cycles": stats.total_cycles,
        "simulated_ms": stats.time_us / 1000,
        "mac_utilisation": stats.mac_utilisation,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    print_figures(figures)
    return 0


def print_figures(f: dict) -> None:
    title = f"simulator speed: ResNet-18 int8 on {f['target']}, BLAS threads {f['blas_threads']}"
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in [
        ("instructions", f"{f['instructions']:,}"),
        ("MACs", f"{f['macs']:,}"),
        ("simulated time", f"{f['simulated_cycles']:,} cycles ({f['simulated_ms']:.2f} ms)"),
        ("MAC array utilisation while busy", f"{f['mac_utilisation']:.1%}"),
        ("simulator wall time", f"{f['sim_wall_s']:.3f} s"),
        ("numpy alone, same arithmetic", f"{f['numpy_wall_s']:.3f} s"),
        ("ratio (goal <= 2)", f"{f['ratio_vs_numpy']:.2f}"),
        ("simulated MACs per wall second", f"{f['macs_per_s']:,.0f}"),
        ("instructions per wall second", f"{f['instructions_per_s']:,.0f}"),
    ]:
        table.add_row(name, value)
    console().print(table)


if __name__ == "__main__":
    raise SystemExit(main())
