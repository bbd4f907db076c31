"""The runtime's subcommands of `vpuc`: run (an artifact), sim and disasm (the simulator on
hand-written programs). compiler/cli.py builds the parser and calls `add_commands`."""

from __future__ import annotations

import argparse
import json

import numpy as np

from vpuc.runtime.check import compare, reference_outputs
from vpuc.runtime.inputs import load_npz, random_inputs, save_npz

# --check's default tolerance on rel err: float artifacts must match onnxruntime to float
# rounding; int8 artifacts carry quantisation error (docs/metrics.md).
DEFAULT_TOLERANCE = {"float32": 1e-4, "int8": 0.1}
EXIT_CHECK_FAILED = 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a .vpub artifact on the TVM VM (and the VPU simulator)")
    p.add_argument("artifact", help=".vpub file")
    p.add_argument("--inputs", help=".npz with one array per input name (default: seeded random)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--outputs", help="write the outputs to this .npz")
    p.add_argument("--check", metavar="MODEL", help="compare with onnxruntime on this ONNX model")
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="largest relative error --check accepts (default 1e-4, or 0.1 for int8 artifacts)",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(handler=run_command)

    from vpuc.sim import commands as sim_commands

    p = sub.add_parser("sim", help="assemble and simulate a hand-written VPU program")
    sim_commands.add_sim_arguments(p)
    p.set_defaults(handler=sim_commands.sim_command)
    p = sub.add_parser("asm", help="assemble a VPU program (.s) into a binary (.bin)")
    sim_commands.add_asm_arguments(p)
    p.set_defaults(handler=sim_commands.asm_command)
    p = sub.add_parser("disasm", help="disassemble a binary VPU program")
    sim_commands.add_disasm_arguments(p)
    p.set_defaults(handler=sim_commands.disasm_command)


def run_command(args) -> int:
    from vpuc.runtime import load
    from vpuc.runtime.report import print_run_report

    executable = load(args.artifact)
    if args.inputs:
        inputs, source = load_npz(args.inputs), args.inputs
    else:
        inputs, source = random_inputs(executable.inputs, args.seed), f"random (seed {args.seed})"
    outputs = executable.run(inputs, source=args.inputs)
    if args.outputs:
        save_npz(args.outputs, outputs)
    check = None
    if args.check:
        errors = compare(outputs, reference_outputs(args.check, inputs), args.check)
        numerics = executable.artifact.manifest.get("numerics", "float32")
        tolerance = args.tolerance if args.tolerance is not None else DEFAULT_TOLERANCE[numerics]
        check = {
            "model": args.check,
            "numerics": numerics,
            "tolerance": tolerance,
            "outputs": [e.to_json() for e in errors],
            "passed": all(e.rel_err <= tolerance for e in errors),
        }
    result = {
        "artifact": args.artifact,
        "inputs": source,
        "outputs": [_summary(name, array) for name, array in outputs.items()],
        "check": check,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_run_report(executable, result)
    return EXIT_CHECK_FAILED if check and not check["passed"] else 0


def _summary(name: str, array: np.ndarray) -> dict:
    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    stats = (
        {"min": float(finite.min()), "max": float(finite.max()), "mean": float(finite.mean())}
        if finite.size
        else {}
    )
    return {"name": name, "shape": list(array.shape), "dtype": array.dtype.name, **stats}
