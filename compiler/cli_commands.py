"""The compiler's `vpuc` subcommands (compile, tune, calibrate-host, partition, optimize,
zoo, targets): each reads its parsed arguments and returns the exit code; errors are raised
for compiler/cli.py to answer in one line. TVM is imported inside each command."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from pathlib import Path

from vpuc.compiler.cli_options import (
    bound_inputs,
    calibration_options,
    input_shapes,
    partition_options,
    pass_options,
    selection_fields,
)

# Set by cli.console_main, the `vpuc` process's own entry: the process is this command's
# alone, so the objects its imports made (TVM's, about 100,000) may be frozen out of the
# garbage collector's full collections (gc.freeze): each one scanned them all, 0.11 s of
# tinyconv's compile and 0.12-0.25 s of MobileNet's (two), and they live until the
# process ends anyway. A caller running commands in its own process keeps its collector.
FREEZE_AFTER_IMPORTS = False


# The commands that call _freeze_after_imports once their imports are done.
FREEZING_COMMANDS = ("compile", "partition")
# The collector's thresholds after the freeze, in the command's own process (mypy's main sets
# the same): a young collection per 200,000 allocations, not 700. The compile's objects are
# mostly freed by their reference counts, not found by collections: after its imports,
# YOLOv8n-320's compile ran 29 full collections and 4,000 young ones, 3.7-6.4 s of CPU in all
# (gc.callbacks, two runs), and one young one with these; its peak RSS 755 -> 768 MB.
COMMAND_GC_THRESHOLDS = (200_000, 30, 30)


def own_process() -> None:
    """cli.console_main: the process is the command's. The collector pauses until the
    command's imports are frozen (_freeze_after_imports), since its collections during them
    (three full ones among them, 0.06-0.09 s) scan objects that live to the end anyway; a
    command that freezes nothing resumes it once known (collector_for)."""
    global FREEZE_AFTER_IMPORTS
    FREEZE_AFTER_IMPORTS = True
    gc.disable()


def collector_for(command: str) -> None:
    """Before the command's imports (cli._guarded): the collector runs again unless the
    command will freeze them."""
    if command not in FREEZING_COMMANDS:
        gc.enable()


def _freeze_after_imports() -> None:
    """Once per process, when the process is the command's (FREEZE_AFTER_IMPORTS): freeze
    what the imports made and let the collector run again, at COMMAND_GC_THRESHOLDS."""
    global FREEZE_AFTER_IMPORTS
    if FREEZE_AFTER_IMPORTS:
        gc.freeze()
        gc.set_threshold(*COMMAND_GC_THRESHOLDS)
        gc.enable()
        FREEZE_AFTER_IMPORTS = False


def _artifact_path(args) -> Path:
    """-o (default: the model's name with .vpub, here), never the model nor a non-artifact."""
    from vpuc.compiler.errors import CompileError

    if args.output == "":
        raise CompileError("-o: is empty; give a file name such as model.vpub")
    output = Path(args.output) if args.output else Path(Path(args.model).stem + ".vpub")
    if output.is_dir():
        raise CompileError(f"{output}: is a directory; give -o a file name such as model.vpub")
    if output.exists() and not output.is_file():  # /dev/zero, a FIFO: never read as a zip
        raise CompileError(f"{output}: is not a regular file; give -o a file name such as model.vpub")
    parent = next((p for p in output.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise CompileError(f"{output}: {parent} is not a directory")
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


def compile_command(args) -> int:
    output = _artifact_path(args)
    reference = _reference_choice(args)
    target = _refuse_then_import_tvm(args)
    from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
    from vpuc.compiler.reports import print_compile_report

    _freeze_after_imports()
    options = CompileOptions(
        input_shapes=input_shapes(args.input_shape), bound_inputs=bound_inputs(args.bind_input),
        **pass_options(args), **partition_options(args), **calibration_options(args, target),
    )  # fmt: skip
    with _progress() as progress:
        prepared = prepare_model(args.model, target, options, progress=progress)
        tuning_db = _tuning_db(args.db, prepared.target.name)
        artifact = build_artifact(
            args.model, prepared, reference=reference, progress=progress, tuning_db=tuning_db
        )
    for warning in artifact.report["warnings"]:
        print(f"vpuc compile: warning: {warning}", file=sys.stderr)
    artifact.save(output)
    if args.per_layer_csv:
        from vpuc.compiler.summary import write_layer_csv

        write_layer_csv(
            args.per_layer_csv, (artifact.report.get("vpu") or {}).get("layers", []), "estimate_cycles"
        )
    if args.emit_asm:
        _emit_asm(prepared, Path(args.emit_asm))
    if args.json:
        print(json.dumps({**artifact.report, "artifact": str(output)}, indent=2))
    else:
        print_compile_report(artifact.report, artifact.manifest, output)
    return 0


def _refuse_then_import_tvm(args):
    """The target (loaded and returned) and the model's path: what a command reading an ONNX
    model can refuse before the compiler's imports (TVM's, 0.7 s), so that a typo is
    answered at once. The model itself is read after them (the frontend's first step).
    Then TVM is imported, its global functions listed once per number of them (tvm_import)."""
    from vpuc.compiler.frontend.load import check_model_path
    from vpuc.compiler.tvm_import import import_tvm
    from vpuc.targets import load_target

    target = load_target(args.target)
    check_model_path(args.model)
    import_tvm()
    return target


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
    from vpuc.compiler.host.database import META, default_db_dir

    if db is not None:
        return Path(db)
    default = default_db_dir(target_name)
    return default if (default / META).is_file() else None


def tune_command(args) -> int:
    from vpuc.compiler.errors import CompileError

    if args.time_budget is not None and not 0 < args.time_budget < float("inf"):  # nan fails too
        raise CompileError(f"--time-budget: must be a positive number of seconds, got {args.time_budget}")
    target = _refuse_then_import_tvm(args)
    from vpuc.compiler.driver import CompileOptions
    from vpuc.compiler.reports import print_tune_report
    from vpuc.compiler.tune.tuner import tune_model

    options = CompileOptions(
        input_shapes=input_shapes(args.input_shape), **partition_options(args),
        **calibration_options(args, target),
    )  # fmt: skip
    budget_s = args.time_budget
    result = tune_model(
        args.model, target, options, db_dir=args.db, trials=args.trials, time_budget_s=budget_s,
        seed=args.seed, progress=not args.json and sys.stderr.isatty(),
    )  # fmt: skip
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print_tune_report(result)
    return 0


def calibrate_host_command(args) -> int:
    from vpuc.compiler.reports import print_calibration
    from vpuc.compiler.tune.calibrate import fit

    calibration = fit(args.target, args.db)
    if args.json:
        print(json.dumps(calibration.to_json(), indent=2))
    else:
        print_calibration(calibration)
    return 0


def partition_command(args) -> int:
    target = _refuse_then_import_tvm(args)
    from vpuc.compiler.driver import CompileOptions, prepare_model
    from vpuc.compiler.errors import CompileError
    from vpuc.compiler.partition.draw import check_can_render_svg, write_drawing
    from vpuc.compiler.reports import print_partition_report

    _freeze_after_imports()
    if args.svg:
        check_can_render_svg(args.svg)  # before calibrating, not after
    # The same stages as `vpuc compile` (quantisation included): the report is the partition
    # of the module that compile builds, computed the same way (tests/e2e/test_corpus.py).
    # A QDQ model's accuracy is not measured: its placement does not depend on it. A float
    # model is calibrated and measured as compile does: its placement depends on both (the
    # accuracy floor keeps layers in float, the code generator reads the calibrated scales).
    options = CompileOptions(
        input_shapes=input_shapes(args.input_shape), bound_inputs=bound_inputs(args.bind_input),
        **partition_options(args), **calibration_options(args, target), measure_accuracy=False,
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
    from vpuc.compiler.summary import mac_share

    report = {**report, "macs": mac_share(report, prepared.imported.onnx_model)}
    if args.json:
        print(json.dumps({"model": prepared.imported.name, **report}, indent=2))
    else:
        print_partition_report(prepared.imported.name, report)
        macs = report["macs"]
        if macs["total"]:
            print(f"MACs on the VPU: {macs['vpu']:,} of {macs['total']:,} ({macs['vpu_share']:.1%})")
    return 0


def optimize_command(args) -> int:
    target = _refuse_then_import_tvm(args)
    from vpuc.compiler.frontend import import_model
    from vpuc.compiler.pipeline import PassSelection, check_dump_after, optimize_imported

    selection = PassSelection(**selection_fields(pass_options(args)))
    check_dump_after(args.dump_after, selection)
    imported = import_model(args.model, input_shapes(args.input_shape), bound_inputs(args.bind_input))
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


def zoo_command(args) -> int:
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
    from vpuc.runtime.artifact import follow_umask

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise CompileError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        follow_umask(fd)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise CompileError(f"{path}: cannot write: {exc.strerror}") from None


def targets_command(args) -> int:
    from vpuc.targets import builtin_target_names, load_target

    targets = [load_target(name) for name in builtin_target_names()]
    if args.json:
        print(json.dumps([t.to_json() for t in targets], indent=2))
        return 0
    for target in targets:
        print(f"{target.name:10s} {target.kind:4s} {target.description}")
    return 0


def _reference_choice(args) -> bool | str:
    """--reference builds the QDQ reference now; --no-reference leaves it out; by default the
    artifact carries it for `vpuc run --check` to build."""
    from vpuc.compiler.errors import CompileError

    if args.reference and args.no_reference:
        raise CompileError("--reference and --no-reference exclude each other: give one")
    return True if args.reference else (False if args.no_reference else "deferred")
