"""Where a model's CPU time goes, kernel by kernel: vpuc's host kernels against onnxruntime's
nodes.

    vpuc         each default-scheduled kernel of `vpuc compile --target cpu`, built alone
                 and timed alone by TVM's time_evaluator on random inputs of the shapes the
                 model's VM passes it (20 calls per repeat, 40 repeats): its fastest repeat,
                 times the number of calls the model makes
    onnxruntime  SessionOptions.enable_profiling over 300 runs of the model (full graph
                 optimisation, --ort-threads threads, default 1: vpuc runs its zoo kernels on
                 one core): each node's fastest `_kernel_time`

The fastest, not the median: on the shared machine the minimum is the least disturbed
figure of a kernel that cannot run faster than its code allows. A kernel timed alone has its
inputs in cache; the whole model's latency (bench/cpu_vs_ort.py) also holds the VM's calls,
`Executable.run`'s input checks and the cache misses between kernels.

    python bench/host_kernels.py [--models resnet_mini,...] [--ort-threads 1]
writes bench/out/host_kernels.json: {"ort_threads", "models": {name: {"vpuc_us": {kernel:
    us}, "ort_us": {node: us}, "vpuc_sum_us", "ort_sum_us"}}}
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "1")  # before TVM starts its thread pool

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
from tvm import relax, tirx  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_json  # noqa: E402

from vpuc.compiler.driver import CompileOptions, prepare_model  # noqa: E402
from vpuc.compiler.host.build import lowering_pipeline, schedule_host_module  # noqa: E402
from vpuc.compiler.host.target import resolve_host_target  # noqa: E402
from vpuc.examples import zoo  # noqa: E402

ORT_RUNS = 300


def vpuc_kernels(model, inputs: dict[str, np.ndarray]) -> dict[str, float]:
    """Per kernel: its fastest time alone (us) x the calls the model makes to it."""
    prepared = prepare_model(model, "cpu", CompileOptions())
    host = resolve_host_target(prepared.target)
    mod, _ = schedule_host_module(prepared.mod, host)
    vm = relax.VirtualMachine(
        relax.build(mod, target=host.target, relax_pipeline=lowering_pipeline(host)), tvm.cpu()
    )
    shapes, calls = {}, collections.Counter()

    def capture(func, symbol, before, ret, *args) -> int:
        if before:
            shapes[symbol] = [(tuple(a.shape), str(a.dtype)) for a in args if hasattr(a, "shape")]
            calls[symbol] += 1
        return 0

    vm.set_instrument(tvm_ffi.convert(capture))
    vm["main"](*[tvm.runtime.tensor(array) for array in inputs.values()])
    rng = np.random.default_rng(0)
    times = {}
    for gv, func in mod.functions.items():
        name = gv.name_hint
        if not isinstance(func, tirx.PrimFunc) or name not in shapes:
            continue  # a kernel the VM never calls (a reshape it does as a view)
        lib = tvm.tirx.build(func.with_attr("global_symbol", name), target=host.target)
        args = [tvm.runtime.tensor(rng.standard_normal(shape).astype(dtype)) for shape, dtype in shapes[name]]
        timer = lib.time_evaluator(name, tvm.cpu(), number=20, repeat=40)
        times[name] = min(timer(*args).results) * 1e6 * calls[name]
    return times


def ort_nodes(model, inputs: dict[str, np.ndarray], threads: int) -> dict[str, float]:
    """Per onnxruntime node: its fastest kernel time (us) over ORT_RUNS runs."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    with tempfile.TemporaryDirectory(prefix="vpuc-ort-profile-") as work:
        options.profile_file_prefix = str(Path(work) / "ort")
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        for _ in range(ORT_RUNS):
            session.run(None, inputs)
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            node = f"{event['args'].get('op_name')} {event['name'].removesuffix('_kernel_time')}"
            nodes[node] = min(nodes.get(node, float("inf")), float(event["dur"]))
    return nodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet_mini", help=f"comma-separated: {', '.join(zoo.MODELS)}")
    parser.add_argument("--ort-threads", type=int, default=1)
    args = parser.parse_args()
    figures = {"ort_threads": args.ort_threads, "models": {}}
    for name in args.models.split(","):
        model = zoo.build(name)
        inputs = zoo.sample_inputs(model, seed=0)
        ours, theirs = vpuc_kernels(model, inputs), ort_nodes(model, inputs, args.ort_threads)
        ours_us, theirs_us = sum(ours.values()), sum(theirs.values())
        figures["models"][name] = {
            "vpuc_us": ours,
            "ort_us": theirs,
            "vpuc_sum_us": ours_us,
            "ort_sum_us": theirs_us,
        }
        threads = f"{args.ort_threads} thread(s)"
        print(f"{name}: vpuc kernels {ours_us:.0f} us, onnxruntime nodes {theirs_us:.0f} us ({threads}), "
              f"the fastest of each summed: {ours_us / theirs_us:.2f}x")  # fmt: skip
        for kernel, us in sorted(ours.items(), key=lambda item: -item[1]):
            print(f"  vpuc {us:8.1f} us  {kernel}")
        for node, us in sorted(theirs.items(), key=lambda item: -item[1]):
            print(f"  ort  {us:8.1f} us  {node}")
    print(f"wrote {write_json('host_kernels', figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
