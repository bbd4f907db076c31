"""What a parallel loop costs and buys on this machine: the figures behind PARALLEL_MIN_MACS
(compiler/host/defaults.py).

    launch   a kernel of 2 x N float multiplies whose outer loop of 2 is parallel, against
             the same loop serial (N = 8: the thread pool's launch and barrier alone)
    convs    one 3x3 conv + relu (C -> C channels, HxW, padding 1; what the zoo's layers
             are) with the default schedule as it is, serial, and with its fused outer
             loop parallel (PARALLEL_MIN_MACS set to 0 for that build), from 0.6M to 604M
             MACs

Both with TVM_NUM_THREADS = the cores available (targets/host_cores.py), each build timed
by TVM's time_evaluator, serial and parallel in alternation (one repeat of each in turn,
REPEATS times) so a change of the shared machine's load hits both; per case the fastest
and the median repeat, and parallel / serial of each (below 1: the parallel loop pays).
The load average is recorded: on a machine other processes load, a second thread waits for
a core and the barrier waits for it.

    python bench/parallel_cost.py [--repeats 15]
writes bench/out/parallel_cost.json: {"threads", "loadavg_before", "loadavg_after",
    "launch": [{"n", "serial_us", "parallel_us", ...}], "convs": [{"channels", "size",
    "macs", "serial_min_us", "serial_median_us", "parallel_min_us", "parallel_median_us",
    "ratio_min", "ratio_median"}]}
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from vpuc.targets.host_cores import use_available_cores

use_available_cores()  # before TVM starts its thread pool

import numpy as np  # noqa: E402
import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
from tvm import te, topi  # noqa: E402
from tvm.script import tirx as T  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_json  # noqa: E402

from vpuc.compiler.host import defaults  # noqa: E402
from vpuc.compiler.host.build import schedule_options  # noqa: E402
from vpuc.compiler.host.target import resolve_host_target  # noqa: E402
from vpuc.targets.loader import load_target  # noqa: E402

CONVS = [(16, 8), (16, 16), (32, 8), (16, 32), (32, 16), (64, 8), (32, 32), (64, 32), (64, 64), (128, 64)]
# (channels, size): 2.36M MACs three ways (resnet_mini's 3x3 convs: 16x32x32, 32x16x16, 64x8x8)
LAUNCH_SIZES = [8, 4096, 65536]
TARGET_MS = 2  # each repeat runs the kernel this long at least


def _scale(n: int, parallel: bool):
    loop = T.parallel if parallel else T.serial

    @T.prim_func
    def scale(a: T.Buffer((2, n), "float32"), b: T.Buffer((2, n), "float32")):
        for i in loop(2):
            for j in range(n):
                b[i, j] = a[i, j] * T.float32(2)

    return scale


def _conv(channels: int, size: int):
    x = te.placeholder((1, channels, size, size), name="x")
    w = te.placeholder((channels, channels, 3, 3), name="w")
    y = topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))
    return te.create_prim_func([x, w, y])


def _args(func) -> list:
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in param.shape] for param in func.params]
    return [tvm.runtime.tensor(rng.standard_normal(shape).astype(np.float32)) for shape in shapes]


def alternate(builds: dict, args: list, repeats: int) -> dict[str, list[float]]:
    """us per call of each build, one repeat of each in turn."""
    timers = {
        label: lib.time_evaluator("main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=TARGET_MS)
        for label, lib in builds.items()
    }
    times: dict[str, list[float]] = {label: [] for label in builds}
    for _ in range(repeats):
        for label, timer in timers.items():
            times[label].append(timer(*args).mean * 1e6)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    host = resolve_host_target(load_target("cpu"))
    options = schedule_options(host)
    threads = int(tvm_ffi.get_global_func("runtime.NumThreads")())
    figures = {"threads": threads, "loadavg_before": os.getloadavg(), "launch": [], "convs": []}
    print(f"{threads} threads, load average {figures['loadavg_before'][0]:.1f}")

    def build(func):
        return tvm.tirx.build(func.with_attr("global_symbol", "main"), target=host.target)

    for n in LAUNCH_SIZES:
        builds = {"serial": build(_scale(n, False)), "parallel": build(_scale(n, True))}
        times = alternate(builds, _args(_scale(n, False)), args.repeats)
        row = {"n": n, "serial_us": min(times["serial"]), "parallel_us": min(times["parallel"])}
        row["parallel_minus_serial_us"] = row["parallel_us"] - row["serial_us"]
        figures["launch"].append(row)
        serial, parallel = row["serial_us"], row["parallel_us"]
        print(f"launch, 2 x {n:6d}: serial {serial:7.2f} us, parallel {parallel:7.2f} us (fastest)")

    saved = defaults.PARALLEL_MIN_MACS
    try:
        for channels, size in CONVS:
            func = _conv(channels, size)
            builds = {}
            for label, threshold in (("serial", 1 << 62), ("parallel", 0)):
                defaults.PARALLEL_MIN_MACS = threshold
                builds[label] = build(defaults.default_schedule(func, options))
            times = alternate(builds, _args(func), args.repeats)
            row = {"channels": channels, "size": size, "macs": channels * channels * size * size * 9}
            for label, values in times.items():
                row[f"{label}_min_us"] = min(values)
                row[f"{label}_median_us"] = statistics.median(values)
            row["ratio_min"] = row["parallel_min_us"] / row["serial_min_us"]
            row["ratio_median"] = row["parallel_median_us"] / row["serial_median_us"]
            figures["convs"].append(row)
            print(
                f"conv 3x3 {channels}->{channels} {size}x{size} {row['macs'] / 1e6:.2f}M MACs: serial "
                f"{row['serial_min_us']:.1f} / {row['serial_median_us']:.1f} us, parallel "
                f"{row['parallel_min_us']:.1f} / {row['parallel_median_us']:.1f} us (fastest / median): "
                f"parallel / serial {row['ratio_min']:.2f} / {row['ratio_median']:.2f}",
                flush=True,
            )
    finally:
        defaults.PARALLEL_MIN_MACS = saved
    figures["loadavg_after"] = os.getloadavg()
    print(f"load average {figures['loadavg_after'][0]:.1f}; wrote {write_json('parallel_cost', figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
