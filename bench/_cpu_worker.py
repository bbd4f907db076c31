"""One runtime timed alone in this process, for bench/cpu_vs_ort.py (not a bench itself).

    python bench/_cpu_worker.py ort MODEL.onnx INPUTS.npz --threads N --calls C --warmup W
    python bench/_cpu_worker.py vpuc MODEL.vpub INPUTS.npz --calls C --warmup W

loads one onnxruntime session or one vpuc artifact (never both: TVM's runtime in the
process, or the other runtime's calls between, changed onnxruntime's two-thread time 1.7x,
docs/tuning.md), makes W warm-up calls and then C calls back to back, and prints one line
of JSON: the median, fastest and slowest call in seconds and the load average before and
after. vpuc's artifact runs as `vpuc run` runs it (Executable, its thread pool sized by
targets/host_cores.py) without the per-op timing callbacks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def runner(args):
    inputs = dict(np.load(args.inputs))
    if args.runtime == "ort":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
        return lambda: session.run(None, inputs)
    from vpuc.runtime.artifact import Artifact
    from vpuc.runtime.executor import Executable

    executable = Executable(Artifact.load(args.model), args.model, time_host_ops=False)
    return lambda: executable.run(inputs)


def _pool_threads(runtime: str) -> int | None:
    """The threads of TVM's pool the last run used (targets/host_cores.py follows the load)."""
    if runtime != "vpuc":
        return None
    from vpuc.targets import host_cores

    follower = host_cores._FOLLOWER
    return follower.threads if follower is not None else int(os.environ.get("TVM_NUM_THREADS") or 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runtime", choices=("ort", "vpuc"))
    parser.add_argument("model")
    parser.add_argument("inputs")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime's intra_op_num_threads")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    call = runner(args)
    load_before = os.getloadavg()[0]
    for _ in range(args.warmup):
        call()
    times, threads = [], []
    for _ in range(args.calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
        threads.append(_pool_threads(args.runtime))
    figures = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
               "load_before": load_before, "load_after": os.getloadavg()[0]}  # fmt: skip
    if args.runtime == "vpuc":
        figures["tvm_num_threads"] = os.environ.get("TVM_NUM_THREADS")  # the pool's size
        figures["calls_per_thread_count"] = {str(n): threads.count(n) for n in sorted(set(threads))}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
