"""The runtime's subcommands of `vpuc`: run (an artifact), sim and disasm (the simulator on
hand-written programs). compiler/cli.py builds the parser and calls `add_commands`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from vpuc.runtime.check import check_run
from vpuc.runtime.inputs import (
    InputError,
    check_index_ranges,
    load_npz,
    nonfinite_counts,
    random_inputs,
    save_npz,
)

EXIT_CHECK_FAILED = 1
EXIT_NONFINITE = 1  # an output holds NaN or Inf (and --allow-nonfinite was not given)


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run a .vpub artifact: host graph on the TVM VM, VPU calls on the simulator"
    )
    p.add_argument("artifact", help=".vpub file")
    p.add_argument("--inputs", help=".npz with one array per input name (default: seeded random)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--outputs", help="write the outputs to this .npz")
    p.add_argument(
        "--check", metavar="MODEL", help="compare with onnxruntime on this ONNX model (docs/metrics.md)"
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="float artifacts: largest relative error --check accepts (default 1e-4); int8 artifacts: "
        "largest difference in LSB from the QDQ reference (default 1)",
    )
    p.add_argument(
        "--trace", metavar="OUT.json", help="write one timeline (host, link, VPU units) for Perfetto"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="accept NaN or Inf inputs, and exit 0 even when an output has them (reported either way)",
    )
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
    from vpuc.runtime.trace import write_run_trace

    _check_arguments(args)
    executable = load(args.artifact)
    if args.inputs:
        inputs, source = load_npz(args.inputs, executable.inputs), args.inputs
    else:
        inputs, source = random_inputs(executable.inputs, args.seed), f"random (seed {args.seed})"
    if not args.allow_nonfinite:  # every artifact alike; a graph built for NaN (IsNaN) asks for it
        _refuse_nonfinite(inputs, source)
    check_index_ranges(executable.inputs, inputs, args.inputs or "random inputs")
    executable.keep_traces(bool(args.trace))
    executable.record_outputs(bool(args.check))
    outputs = executable.run(inputs, source=args.inputs)
    stats = executable.last_run
    nonfinite = nonfinite_counts(outputs)
    for name, count in nonfinite.items():
        print(
            f"vpuc run: warning: output '{name}': {count} of {outputs[name].size} values are NaN or Inf",
            file=sys.stderr,
        )
    if args.outputs:
        save_npz(args.outputs, outputs)
    if args.trace:
        write_run_trace(stats, args.trace)
    check = check_run(executable, inputs, outputs, args.check, args.tolerance) if args.check else None
    result = {
        "outputs": [_summary(name, array) for name, array in outputs.items()],
        "check": check,
        **stats.to_json(),
    }
    if args.json:
        print(json.dumps(_json_safe(result), indent=2, allow_nan=False))
    else:
        print_run_report(executable, result, source, stats)
    if check and not check["passed"]:
        return EXIT_CHECK_FAILED
    return EXIT_NONFINITE if nonfinite and not args.allow_nonfinite else 0


def _refuse_nonfinite(inputs: dict[str, np.ndarray], source: str) -> None:
    for name, array in inputs.items():
        if np.asarray(array).dtype.kind == "f":
            bad = int(np.count_nonzero(~np.isfinite(array)))
            if bad:
                raise InputError(
                    f"{source}: input '{name}' has {bad} NaN or infinite value(s); "
                    "give --allow-nonfinite if the model is meant for them"
                )


def _check_arguments(args) -> None:
    """Refuse what would fail late or destroy a file the user has."""
    if args.tolerance is not None and not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise InputError(f"--tolerance: must be a finite number >= 0, got {args.tolerance}")
    if args.tolerance is not None and not args.check:
        raise InputError("--tolerance: only used with --check MODEL")
    if not 0 <= args.seed < 2**32:
        raise InputError(f"--seed: must be between 0 and 2^32 - 1, got {args.seed}")
    if args.outputs:
        _check_outputs_path(Path(args.outputs), args)


def _check_outputs_path(out: Path, args) -> None:
    if out.is_dir():
        raise InputError(f"{out}: is a directory; give --outputs a file name such as outputs.npz")
    if not out.exists():
        return
    if not out.is_file():
        raise InputError(f"{out}: is not a regular file; give --outputs a file name such as outputs.npz")
    for flag, other in (("the artifact", args.artifact), ("--inputs", args.inputs), ("--check", args.check)):
        if other and Path(other).exists() and out.samefile(other):
            raise InputError(f"{out}: --outputs names {flag}'s file; give another file name")
    with open(out, "rb") as existing:
        if not existing.read(4).startswith(b"PK\x03\x04"):
            raise InputError(f"{out}: exists and is not an .npz file; refusing to overwrite it")


def _summary(name: str, array: np.ndarray) -> dict:
    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    stats = (
        {"min": float(finite.min()), "max": float(finite.max()), "mean": float(finite.mean())}
        if finite.size
        else {}
    )
    nonfinite = int(array.size - finite.size)
    return {
        "name": name,
        "shape": list(array.shape),
        "dtype": array.dtype.name,
        **stats,
        "nonfinite": nonfinite,
    }


def _json_safe(value):
    """NaN and infinities as null: JSON has no numbers for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
