"""The `vpuc` command line: where the compiler, the runtime and the simulator meet.

    vpuc compile MODEL --target T -o OUT.vpub   compile an ONNX model
    vpuc tune MODEL --target T [--time-budget M] tune its host kernels into a database
    vpuc calibrate-host [--target T]            fit [host] cost figures to this machine
    vpuc optimize MODEL [--target T] [--json]   run the graph passes, print the fusion audit
    vpuc partition MODEL --target T [--json]    where each op runs and why, what crosses
    vpuc run OUT.vpub [--inputs X.npz] ...      run an artifact (TVM VM + VPU simulator)
    vpuc regress DIR [--jobs N | --ray]         run a regression suite against its goldens
    vpuc zoo OUTDIR                             write the example models
    vpuc targets                                list the built-in targets
    vpuc sim PROGRAM.s / vpuc disasm PROGRAM.bin  the simulator on hand-written programs
    vpuc --version

Every user error prints one line `vpuc <command>: <file or node>: <what is wrong>` to stderr
and exits 2; a failed --check exits 1; a bug in vpuc prints one line and exits 3 (set
VPUC_DEBUG=1 for the traceback); a reader closing the pipe early (`| head`) ends it quietly
with 141, as SIGPIPE ends other tools. Nothing here imports TVM until a command runs, so
`vpuc --help` answers at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `git log | head -1`
BUG_HINT = "this is a bug in vpuc, rerun with VPUC_DEBUG=1 for details"
# Calibration methods and defaults (compiler/quantize/ranges.py; a test keeps them equal):
# spelled here so that building the parser imports no TVM.
CALIB_METHODS = ("minmax", "percentile", "entropy", "mse", "auto")
DEFAULT_CALIB_METHOD = "percentile"
DEFAULT_PERCENTILE = 99.99
# QuantOptions' defaults (compiler/quantize/options.py; the same test keeps them equal).
QUANT_SWITCHES = {
    "equalize": False, "absorb_bias": False, "smoothquant": True, "adaround": False, "sensitivity": True
}  # fmt: skip
DEFAULT_ADAROUND_BUDGET_S = 1.0
DEFAULT_MIN_SQNR_DB = 25.0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # in argparse's own output (--help, --version, usage)
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        raise
    if not hasattr(args, "handler"):
        parser.print_help()
        sys.stdout.flush()
        return EXIT_USER_ERROR
    return _guarded(args.command, args.handler, args)


def _guarded(command: str, handler: Callable[[argparse.Namespace], int], args) -> int:
    from vpuc.compiler.errors import CompileError, InternalError
    from vpuc.runtime.errors import USER_ERRORS
    from vpuc.targets import TargetError

    try:
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except (CompileError, TargetError, *USER_ERRORS) as exc:
        print(f"vpuc {command}: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"vpuc {command}: interrupted", file=sys.stderr)
        return 130
    except InternalError as exc:  # a known stage failed inside TVM: a bug, named
        _debug_traceback()
        print(f"vpuc {command}: internal error: {exc}; {BUG_HINT}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    except Exception as exc:  # a bug: one line, never a traceback unless asked
        _debug_traceback()
        message = " ".join(str(exc).split())[:500]
        print(f"vpuc {command}: internal error ({type(exc).__name__}: {message}); {BUG_HINT}",
              file=sys.stderr)  # fmt: skip
        return EXIT_INTERNAL_ERROR


def _debug_traceback() -> None:
    if os.environ.get("VPUC_DEBUG"):
        traceback.print_exc()


def _silence_stdout() -> None:
    """The reader is gone: point stdout at /dev/null so the exit's flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests capture it)
        pass


class _VersionAction(argparse.Action):
    """`vpuc --version`: vpuc's version and those of the libraries that decide its results,
    read from the installed metadata (nothing imported)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="print the versions and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def version_text() -> str:
    from importlib import metadata

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    libraries = ", ".join(f"{n} {installed(n)}" for n in ("apache-tvm", "onnx", "onnxruntime", "numpy"))
    python = ".".join(map(str, sys.version_info[:3]))
    return f"vpuc {installed('vpuc')} ({libraries}; Python {python})"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vpuc", description="Compile ONNX models for the vpuc int8 VPU.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", help="compile an ONNX model into a .vpub artifact")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="cpu", help="built-in target name or a .toml path (default: cpu)")
    p.add_argument("-o", "--output", help="artifact to write (default: MODEL's name with .vpub)")
    _add_input_shape(p)
    p.add_argument("--json", action="store_true", help="print the compile report as JSON")
    p.add_argument(
        "--emit-asm", metavar="DIR", help="also write each VPU program as assembly (vpuc asm reads it)"
    )
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="leave out the QDQ reference `vpuc run --check` compares the VPU with (faster host build)",
    )
    _add_pass_options(p)
    _add_partition_options(p)
    _add_calibration_options(p)
    p.add_argument(
        "--db", metavar="DIR",
        help="tuning database to apply (default: vpuc-tuning/<target> if it exists; docs/tuning.md)",
    )  # fmt: skip
    p.set_defaults(handler=_compile)

    p = sub.add_parser("tune", help="tune a model's host kernels (MetaSchedule) into a tuning database")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="cpu", help="built-in target name or a .toml path (default: cpu)")
    p.add_argument(
        "--trials", type=int, metavar="N", help="candidates to measure in all (default 256 per task)"
    )
    p.add_argument("--time-budget", type=float, metavar="MIN", help="stop after MIN minutes (default: none)")
    p.add_argument("--db", metavar="DIR", help="tuning database to write (default: vpuc-tuning/<target>)")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    _add_input_shape(p)
    p.add_argument("--json", action="store_true", help="print the outcome per task as JSON")
    _add_partition_options(p)
    _add_calibration_options(p)
    p.set_defaults(handler=_tune)

    p = sub.add_parser("calibrate-host", help="fit the partitioner's [host] cost figures to this machine")
    p.add_argument("--target", default="cpu", help="built-in target name or a .toml path (default: cpu)")
    p.add_argument("--db", metavar="DIR", help="time kernels with this tuning database's records")
    p.add_argument("--json", action="store_true", help="print every probe's figures as JSON")
    p.set_defaults(handler=_calibrate_host)

    p = sub.add_parser("partition", help="report where each op runs (VPU or CPU) and why")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="vpu", help="a VPU target name or .toml path (default: vpu)")
    _add_input_shape(p)
    p.add_argument("--json", action="store_true", help="print the partition report as JSON")
    drawing = p.add_mutually_exclusive_group()
    drawing.add_argument("--svg", metavar="FILE", help="draw the partition as SVG (needs graphviz's dot)")
    drawing.add_argument("--dot", metavar="FILE", help="write the drawing as graphviz DOT source")
    _add_partition_options(p)
    _add_calibration_options(p)
    p.set_defaults(handler=_partition)

    p = sub.add_parser("optimize", help="run the graph passes and print the fusion audit")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="cpu", help="built-in target name or a .toml path (default: cpu)")
    _add_input_shape(p)
    p.add_argument("--json", action="store_true", help="print the audit as JSON")
    p.add_argument("--dump-after", metavar="PASS", help="print the Relax module after the pass PASS")
    _add_pass_options(p)
    p.set_defaults(handler=_optimize)

    from vpuc.runtime import cli as runtime_cli

    runtime_cli.add_commands(sub)

    from vpuc.compiler.regress import cli as regress_cli

    regress_cli.add_command(sub)  # vpuc regress DIR: docs/regress.md

    p = sub.add_parser("zoo", help="write the example models (ONNX) to a folder")
    p.add_argument("outdir", help="folder to write <name>.onnx files into")
    p.add_argument("--models", help="comma-separated subset (default: all)")
    p.set_defaults(handler=_zoo)

    p = sub.add_parser("targets", help="list the built-in targets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_targets)
    return parser


def _add_input_shape(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=D1xD2x...",
        help="fix an input's shape, e.g. input=1x3x224x224 (repeatable)",
    )
    parser.add_argument(
        "--bind-input",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="make an input a constant: a number, comma-separated numbers or a .npy (repeatable)",
    )


def _add_pass_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("graph passes (docs/passes.md)")
    levels = group.add_mutually_exclusive_group()
    for level, what in (
        (0, "no graph passes"),
        (1, "cleanups only (fold, cse, dce)"),
        (2, "+ fusions"),
        (3, "+ NHWC layout (the default)"),
    ):
        levels.add_argument(
            f"-O{level}", dest="opt_level", action="store_const", const=level, help=what
        )  # fmt: skip
    group.set_defaults(opt_level=3)
    group.add_argument(
        "--disable-pass", action="append", default=[], metavar="NAME",
        help="skip the graph pass NAME (repeatable; `vpuc optimize --json` lists them)",
    )  # fmt: skip
    group.add_argument(
        "--opt-bisect-limit", type=int, metavar="N",
        help="run only the first N graph passes chosen (to find the pass that breaks a model)",
    )  # fmt: skip


def _pass_options(args) -> dict:
    from vpuc.compiler.pipeline import PassSelection

    PassSelection(args.opt_level, tuple(args.disable_pass), args.opt_bisect_limit)  # checks the names
    return {
        "opt_level": args.opt_level,
        "disabled_passes": tuple(args.disable_pass),
        "opt_bisect_limit": args.opt_bisect_limit,
    }


def _add_partition_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--min-subgraph-ops", type=int, default=1, metavar="N",
        help="VPU subgraphs with fewer ONNX ops stay on the CPU (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--no-profitability", action="store_true",
        help="keep every subgraph the op list allows on the VPU, whatever the cost model says",
    )  # fmt: skip


def _add_calibration_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("quantisation (VPU targets; docs/quantization.md)")
    data = group.add_mutually_exclusive_group()
    data.add_argument(
        "--calib", metavar="X.npz", help="calibration samples: one stacked array per input name"
    )
    data.add_argument(
        "--calib-synthetic", type=int, metavar="N",
        help="N seeded synthetic samples (the default, 32: accuracy figures then mean little)",
    )  # fmt: skip
    group.add_argument("--calib-method", choices=CALIB_METHODS, help=f"(default {DEFAULT_CALIB_METHOD})")
    group.add_argument(
        "--percentile", type=float, help=f"for --calib-method percentile (default {DEFAULT_PERCENTILE})"
    )
    _add_method_options(group)


def _add_method_options(group) -> None:
    on_off = argparse.BooleanOptionalAction
    for flag, field_, what in (
        ("--bias-correction", None, "correct each conv/dense bias for its int8 weights' mean error"),
        ("--equalize", "equalize", "cross-layer equalisation of conv/dense -> relu -> conv/dense chains"),
        ("--absorb-bias", "absorb_bias", "bias absorption across such chains"),
        ("--smoothquant", "smoothquant", "migrate dense-input outliers into the weights (SmoothQuant)"),
        ("--adaround", "adaround", "learn the rounding of conv/dense weights (AdaRound)"),
        ("--sensitivity", "sensitivity", "report each layer's output SQNR when it alone is int8"),
    ):  # fmt: skip
        state = "on" if field_ is None or QUANT_SWITCHES[field_] else "off"
        group.add_argument(flag, action=on_off, default=None, help=f"{what} (default {state})")
    group.add_argument(
        "--smoothquant-alpha", type=_alpha, default=None, metavar="A",
        help="SmoothQuant migration strength in (0, 1), or 'auto': chosen per tensor (the default)",
    )  # fmt: skip
    group.add_argument(
        "--adaround-budget", type=float, default=None, metavar="SECONDS",
        help=f"compile time AdaRound may spend, all layers together (default {DEFAULT_ADAROUND_BUDGET_S})",
    )  # fmt: skip
    group.add_argument(
        "--keep-float", action="append", default=[], metavar="NODE",
        help="keep the layer computing this ONNX node in float on the CPU (repeatable)",
    )  # fmt: skip
    group.add_argument(
        "--min-sqnr", type=_floor, default=DEFAULT_MIN_SQNR_DB, metavar="DB",
        help="keep the most sensitive layers in float until the output SQNR on the held-out "
        f"samples reaches DB; 'off' to disable (default {DEFAULT_MIN_SQNR_DB:g})",
    )  # fmt: skip
    group.add_argument(
        "--accept-low-sqnr", action="store_true",
        help="write the artifact even when --min-sqnr cannot be reached (with a warning)",
    )  # fmt: skip


def _alpha(text: str) -> float | None:
    if text.strip().lower() == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1) or 'auto', got {text!r}") from None


def _floor(text: str) -> float | None:
    if text.strip().lower() == "off":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of dB or 'off', got {text!r}") from None


def _calibration_options(args, target) -> dict:
    from dataclasses import replace

    from vpuc.compiler.errors import CompileError
    from vpuc.compiler.quantize import QuantOptions

    given = {
        "--calib": args.calib,
        "--calib-synthetic": args.calib_synthetic,
        "--calib-method": args.calib_method,
        "--percentile": args.percentile,
        "--bias-correction": args.bias_correction,
        **{f"--{name.replace('_', '-')}": getattr(args, name) for name in QUANT_SWITCHES},
        "--smoothquant-alpha": args.smoothquant_alpha,
        "--adaround-budget": args.adaround_budget,
        "--keep-float": args.keep_float or None,
    }
    used = [flag for flag, value in given.items() if value is not None]
    if used and not target.has_vpu:
        raise CompileError(
            f"{used[0]}: target '{target.name}' has no VPU, so nothing is quantised "
            "(calibration options are for VPU targets such as --target vpu)"
        )
    if args.percentile is not None and args.calib_method not in (None, "percentile"):
        raise CompileError(f"--percentile: only used by --calib-method percentile, not {args.calib_method}")
    chosen = {
        name: getattr(args, name)
        for name in ("equalize", "absorb_bias", "smoothquant", "adaround", "sensitivity")
        if getattr(args, name) is not None
    }
    quant_options = replace(
        QuantOptions(),
        **chosen,
        smoothquant_alpha=args.smoothquant_alpha,
        adaround_budget_s=DEFAULT_ADAROUND_BUDGET_S if args.adaround_budget is None else args.adaround_budget,
        keep_float=tuple(args.keep_float),
        min_sqnr_db=args.min_sqnr,
        accept_below_floor=args.accept_low_sqnr,
    )
    return {
        "calib": args.calib,
        "calib_synthetic": args.calib_synthetic,
        "calib_method": args.calib_method or DEFAULT_CALIB_METHOD,
        "percentile": DEFAULT_PERCENTILE if args.percentile is None else args.percentile,
        "bias_correction": args.bias_correction is not False,
        "quant_options": quant_options,
    }


def _partition_options(args) -> dict:
    from vpuc.compiler.errors import CompileError

    if args.min_subgraph_ops < 1:
        raise CompileError(f"--min-subgraph-ops: must be at least 1, got {args.min_subgraph_ops}")
    return {"min_subgraph_ops": args.min_subgraph_ops, "profitability": not args.no_profitability}


def _bound_inputs(specs: list[str]) -> dict[str, str]:
    from vpuc.compiler.frontend import parse_bind_input

    return dict(parse_bind_input(spec) for spec in specs)


def _input_shapes(specs: list[str]) -> dict[str, tuple[int, ...]]:
    from vpuc.compiler.errors import CompileError
    from vpuc.compiler.frontend.shapes import parse_input_shape

    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, dims = parse_input_shape(spec)
        if shapes.get(name, dims) != dims:
            first, second = ("x".join(map(str, d)) for d in (shapes[name], dims))
            raise CompileError(f"--input-shape {name}: given twice, as {first} and {second}")
        shapes[name] = dims
    return shapes


def _artifact_path(args) -> Path:
    """-o (default: the model's name with .vpub, here), never the model nor a non-artifact."""
    from vpuc.compiler.errors import CompileError

    output = Path(args.output) if args.output else Path(Path(args.model).stem + ".vpub")
    if output.is_dir():
        raise CompileError(f"{output}: is a directory; give -o a file name such as model.vpub")
    if output.exists() and Path(args.model).exists() and output.samefile(args.model):
        raise CompileError(f"{output}: -o names the model itself; give another output such as model.vpub")
    if output.exists() and not _is_artifact(output):
        raise CompileError(f"{output}: exists and is not a .vpub artifact; refusing to overwrite it")
    return output


def _is_artifact(path: Path) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return "manifest.json" in zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return False


def _compile(args) -> int:
    from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
    from vpuc.compiler.reports import print_compile_report
    from vpuc.targets import load_target

    output = _artifact_path(args)
    target = load_target(args.target)
    options = CompileOptions(
        input_shapes=_input_shapes(args.input_shape), bound_inputs=_bound_inputs(args.bind_input),
        **_pass_options(args), **_partition_options(args), **_calibration_options(args, target),
    )  # fmt: skip
    with _progress() as progress:
        prepared = prepare_model(args.model, target, options, progress=progress)
        tuning_db = _tuning_db(args.db, prepared.target.name)
        artifact = build_artifact(
            args.model, prepared, reference=not args.no_reference, progress=progress, tuning_db=tuning_db
        )
    for warning in artifact.report["warnings"]:
        print(f"vpuc compile: warning: {warning}", file=sys.stderr)
    artifact.save(output)
    if args.emit_asm:
        _emit_asm(prepared, Path(args.emit_asm))
    if args.json:
        print(json.dumps({**artifact.report, "artifact": str(output)}, indent=2))
    else:
        print_compile_report(artifact.report, artifact.manifest, output)
    return 0


@contextlib.contextmanager
def _progress():
    """A spinner on stderr naming the running compile step and its elapsed time (only on a
    terminal: piped output stays clean)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda stage: None
        return
    with console.status("compiling") as status:
        yield lambda stage: status.update(f"vpuc compile: {stage} ...")


def _emit_asm(prepared, folder: Path) -> None:
    """<folder>/sg<i>.s per VPU program: assembly `vpuc asm` turns back into the same bytes."""
    from vpuc.compiler.errors import CompileError

    try:
        folder.mkdir(parents=True, exist_ok=True)
        for program in prepared.programs:
            (folder / f"sg{program.index}.s").write_text(program.assembly())
    except OSError as exc:
        raise CompileError(f"--emit-asm {folder}: cannot write: {exc.strerror}") from None


def _tuning_db(db: str | None, target_name: str) -> Path | None:
    """--db DIR, else the default location when a database is there."""
    from vpuc.compiler.tune.database import META, default_db_dir

    if db is not None:
        return Path(db)
    default = default_db_dir(target_name)
    return default if (default / META).is_file() else None


def _tune(args) -> int:
    from vpuc.compiler.driver import CompileOptions
    from vpuc.compiler.errors import CompileError
    from vpuc.compiler.reports import print_tune_report
    from vpuc.compiler.tune.tuner import tune_model
    from vpuc.targets import load_target

    if args.time_budget is not None and args.time_budget <= 0:
        raise CompileError(f"--time-budget: must be positive, got {args.time_budget}")
    target = load_target(args.target)
    options = CompileOptions(
        input_shapes=_input_shapes(args.input_shape), **_partition_options(args),
        **_calibration_options(args, target),
    )  # fmt: skip
    budget_s = args.time_budget * 60 if args.time_budget is not None else None
    result = tune_model(
        args.model, target, options, db_dir=args.db, trials=args.trials, time_budget_s=budget_s,
        seed=args.seed, progress=not args.json and sys.stderr.isatty(),
    )  # fmt: skip
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print_tune_report(result)
    return 0


def _calibrate_host(args) -> int:
    from vpuc.compiler.reports import print_calibration
    from vpuc.compiler.tune.calibrate import fit

    calibration = fit(args.target, args.db)
    if args.json:
        print(json.dumps(calibration.to_json(), indent=2))
    else:
        print_calibration(calibration)
    return 0


def _partition(args) -> int:
    from vpuc.compiler.driver import CompileOptions, prepare_model
    from vpuc.compiler.errors import CompileError
    from vpuc.compiler.partition.draw import write_drawing
    from vpuc.compiler.reports import print_partition_report
    from vpuc.targets import load_target

    target = load_target(args.target)
    # The same stages as `vpuc compile` (quantisation included): the report is the partition
    # of the module that compile builds, computed the same way (tests/e2e/test_corpus.py).
    options = CompileOptions(
        input_shapes=_input_shapes(args.input_shape), bound_inputs=_bound_inputs(args.bind_input),
        **_partition_options(args), **_calibration_options(args, target),
    )  # fmt: skip
    prepared = prepare_model(args.model, target, options)
    for warning in prepared.warnings:
        print(f"vpuc partition: warning: {warning}", file=sys.stderr)
    if prepared.partition is None:
        raise CompileError(
            f"target '{prepared.target.name}' has no VPU: nothing to partition (try --target vpu)"
        )
    report = prepared.partition.report
    if args.svg or args.dot:
        path = write_drawing(
            report, prepared.imported.onnx_model, args.svg or args.dot, "svg" if args.svg else "dot"
        )
        if not args.json:
            print(f"drawing: {path}")
    if args.json:
        print(json.dumps({"model": prepared.imported.name, **report}, indent=2))
    else:
        print_partition_report(prepared.imported.name, report)
    return 0


def _optimize(args) -> int:
    from vpuc.compiler.frontend import import_model
    from vpuc.compiler.pipeline import PassSelection, check_dump_after, optimize_imported
    from vpuc.targets import load_target

    selection = PassSelection(**_selection_fields(_pass_options(args)))
    check_dump_after(args.dump_after, selection)
    target = load_target(args.target)
    imported = import_model(args.model, _input_shapes(args.input_shape), _bound_inputs(args.bind_input))
    result = optimize_imported(imported, target, dump_after=args.dump_after, selection=selection)
    if args.json:
        dump = {"dump": result.dump} if result.dump is not None else {}
        print(
            json.dumps({"model": imported.name, "target": target.name, **result.to_json(), **dump}, indent=2)
        )
        return 0
    if result.dump is not None:
        print(f"# after {args.dump_after}\n{result.dump}")
    from vpuc.compiler.reports import print_audit

    print_audit(imported.name, target.name, result)
    return 0


def _selection_fields(options: dict) -> dict:
    return {
        "opt_level": options["opt_level"],
        "disabled": options["disabled_passes"],
        "limit": options["opt_bisect_limit"],
    }


def _zoo(args) -> int:
    from vpuc.compiler.errors import CompileError
    from vpuc.examples import zoo

    names = [n.strip() for n in args.models.split(",")] if args.models else list(zoo.MODELS)
    unknown = [n for n in names if n not in zoo.MODELS]
    if unknown:
        raise CompileError(f"unknown zoo model(s) {', '.join(unknown)} (known: {', '.join(zoo.MODELS)})")
    outdir = Path(args.outdir)
    if outdir.exists() and not outdir.is_dir():
        raise CompileError(f"{outdir}: exists and is not a directory")
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CompileError(f"{outdir}: cannot create the folder: {exc.strerror}") from None
    for name in names:
        path = outdir / f"{name}.onnx"
        write_atomically(path, zoo.build(name).SerializeToString())
        print(path)
    return 0


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename: never a partial file."""
    import tempfile

    from vpuc.compiler.errors import CompileError

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise CompileError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise CompileError(f"{path}: cannot write: {exc.strerror}") from None


def _targets(args) -> int:
    from vpuc.targets import builtin_target_names, load_target

    targets = [load_target(name) for name in builtin_target_names()]
    if args.json:
        print(json.dumps([t.to_json() for t in targets], indent=2))
        return 0
    for target in targets:
        print(f"{target.name:10s} {target.kind:4s} {target.description}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
