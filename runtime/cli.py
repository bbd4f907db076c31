"""The runtime's subcommands of `vpuc`: run (an artifact), sim and disasm (the simulator on
hand-written programs). compiler/cli.py builds the parser and calls `add_commands`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy and the runtime load when a command runs: `vpuc --help` stays quick
    import numpy as np

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
        "largest difference in LSB of each VPU subgraph from its QDQ reference (default 1)",
    )
    p.add_argument(
        "--float-model",
        metavar="F",
        help="--check of a QDQ model: also compare end to end with onnxruntime on this float model",
    )
    p.add_argument(
        "--sqnr-floor",
        type=float,
        default=None,
        help="int8 artifacts: the absolute SQNR (dB) every output must reach against the float model "
        "(default 20; the compile's held-out SQNR minus 10 dB when higher)",
    )
    p.add_argument(
        "--trace", metavar="OUT.json", help="write one timeline (host, link, VPU units) for Perfetto"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--html", metavar="FILE", help="write the HTML report of this run (docs/report.md)")
    p.add_argument("--per-layer-csv", metavar="FILE", help="write the simulated per-layer figures as CSV")
    p.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="accept NaN or Inf inputs, and exit 0 even when an output has them (reported either way)",
    )
    p.set_defaults(handler=run_command)

    p = sub.add_parser("report", help="write one HTML page of an artifact and a run (docs/report.md)")
    p.add_argument("artifact", help=".vpub file")
    p.add_argument("--run", metavar="RUN.json", help="the run's `vpuc run --json` output (of this artifact)")
    p.add_argument("--trace", metavar="TRACE.json", help="the run's `vpuc run --trace` timeline")
    p.add_argument("-o", "--output", required=True, metavar="REPORT.html", help="the page to write")
    p.set_defaults(handler=report_command)

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


def report_command(args) -> int:
    from vpuc.runtime.report_html import load_json, write_report

    run = load_json(args.run, "run JSON") if args.run else None
    trace = load_json(args.trace, "trace JSON") if args.trace else None
    write_report(args.artifact, args.output, run=run, trace=trace, run_source=args.run or "run")
    print(f"wrote {args.output}")
    return 0


def artifact_identity(path: str) -> dict:
    """Which artifact a run JSON belongs to: `vpuc report` refuses a run of another one."""
    import hashlib

    return {"path": str(path), "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


def run_command(args) -> int:
    from vpuc.runtime import load
    from vpuc.runtime.check import check_run
    from vpuc.runtime.inputs import (
        check_index_ranges,
        drop_bound_inputs,
        load_npz,
        nonfinite_counts,
        random_inputs,
        save_npz,
    )
    from vpuc.runtime.report import print_run_report
    from vpuc.runtime.stats import end_to_end
    from vpuc.runtime.trace import run_trace, write_run_trace

    _check_arguments(args)
    if args.html:
        from vpuc.runtime.report_html import check_output

        check_output(args.html)  # before the run, not after it
    executable = load(args.artifact)
    if args.inputs:
        inputs, source = load_npz(args.inputs, executable.inputs), args.inputs
        inputs = drop_bound_inputs(inputs, executable.artifact.bound_inputs, args.inputs)
    else:
        inputs, source = random_inputs(executable.inputs, args.seed), f"random (seed {args.seed})"
    if not args.allow_nonfinite:  # every artifact alike; a graph built for NaN (IsNaN) asks for it
        _refuse_nonfinite(inputs, source)
    check_index_ranges(executable.inputs, inputs, args.inputs or "random inputs")
    executable.keep_traces(bool(args.trace or args.html))
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
    if args.per_layer_csv:
        from vpuc.compiler.summary import write_layer_csv

        nodes = {(c.subgraph, layer["name"]): layer.get("nodes") for c in executable.vpu_calls
                 for layer in c.entry.get("layers", [])}  # fmt: skip
        layers = [
            {**lay, "nodes": nodes.get((lay["subgraph"], lay["name"]))} for lay in stats.to_json()["layers"]
        ]
        write_layer_csv(args.per_layer_csv, layers, "cycles")
    check = (
        check_run(executable, inputs, outputs, args.check, args.tolerance, args.float_model, args.sqnr_floor)
        if args.check
        else None
    )
    result = {
        "artifact": artifact_identity(args.artifact),
        "outputs": [_summary(name, array) for name, array in outputs.items()],
        "check": check,
        **stats.to_json(),
        "end_to_end": end_to_end(stats, executable.target, executable.artifact.report),
    }
    if args.html:
        from vpuc.runtime.report_html import write_report

        write_report(args.artifact, args.html, run=_json_safe(result), trace=run_trace(stats))
    if args.json:
        print(json.dumps(_json_safe(result), indent=2, allow_nan=False))
    else:
        print_run_report(executable, result, source, stats)
    if check and not check["passed"]:
        return EXIT_CHECK_FAILED
    return EXIT_NONFINITE if nonfinite and not args.allow_nonfinite else 0


def _refuse_nonfinite(inputs: dict[str, np.ndarray], source: str) -> None:
    import numpy as np

    from vpuc.runtime.inputs import InputError

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
    from vpuc.runtime.inputs import InputError

    if args.tolerance is not None and not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise InputError(f"--tolerance: must be a finite number >= 0, got {args.tolerance}")
    if args.tolerance is not None and not args.check:
        raise InputError("--tolerance: only used with --check MODEL")
    for flag, value in (("--float-model", args.float_model), ("--sqnr-floor", args.sqnr_floor)):
        if value is not None and not args.check:
            raise InputError(f"{flag}: only used with --check MODEL")
    if args.sqnr_floor is not None and not math.isfinite(args.sqnr_floor):
        raise InputError(f"--sqnr-floor: must be a finite number of dB, got {args.sqnr_floor}")
    for flag, value in (("--check", args.check), ("--float-model", args.float_model)):
        if value:
            _check_model_path(flag, value)
    if not 0 <= args.seed < 2**32:
        raise InputError(f"--seed: must be between 0 and 2^32 - 1, got {args.seed}")
    if args.outputs:
        _check_outputs_path(Path(args.outputs), args)


def _check_model_path(flag: str, path: str) -> None:
    """--check and --float-model name an ONNX file: refuse a missing file, a folder or another
    kind of file in one line before the run, as compile does for its model (its graph only:
    the check reads the weights when it runs the model)."""
    from vpuc.compiler.errors import FrontendError
    from vpuc.compiler.frontend.load import read_onnx_file
    from vpuc.runtime.inputs import InputError

    try:
        read_onnx_file(Path(path), external_data=False)
    except FrontendError as exc:
        raise InputError(f"{flag}: {exc}") from None


def _check_outputs_path(out: Path, args) -> None:
    from vpuc.runtime.inputs import InputError

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
    import numpy as np

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
