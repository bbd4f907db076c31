"""The `vpuc` command line: where the compiler, the runtime and the simulator meet.

    vpuc compile MODEL --target T -o OUT.vpub   compile an ONNX model
    vpuc tune MODEL --target T [--time-budget S] tune its host kernels into a database
    vpuc calibrate-host [--target T]            fit [host] cost figures to this machine
    vpuc optimize MODEL [--target T] [--json]   run the graph passes, print the fusion audit
    vpuc partition MODEL --target T [--json]    where each op runs and why, what crosses
    vpuc run OUT.vpub [--inputs X.npz] ...      run an artifact (TVM VM + VPU simulator)
    vpuc regress DIR [--jobs N | --ray]         run a regression suite against its goldens
    vpuc sweep MODEL --param K=V,... -o DIR     sweep VPU designs through the compiler
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
import atexit
import errno
import os
import sys
import threading
import traceback
from collections.abc import Callable, Sequence

from vpuc.compiler import cli_commands as commands
from vpuc.compiler.cli_options import (
    add_calibration_options,
    add_input_shape,
    add_partition_options,
    add_pass_options,
)

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `git log | head -1`
# The default stays cpu: a model compiles and runs without knowing the VPU's ops, and a VPU
# compile is one explicit word; --help says so (issue 26).
TARGET_HELP = (
    "built-in target name (see vpuc targets) or a .toml path; default: cpu, the host alone "
    "with no VPU: give --target vpu (or vpu-plus, u55-256) to compile for the VPU"
)
BUG_HINT = "this is a bug in vpuc, rerun with VPUC_DEBUG=1 for details"
# Every option that names a file or folder vpuc writes (or a run's timeline it reads back).
# Each writer writes a temporary file and renames it over the path: run as root, that rename
# replaced /dev/full or /dev/null with a regular file (issue 26 item 1), so a path that exists
# and is neither a file nor a folder is refused before any work.
WRITTEN_PATHS = (
    "output", "outputs", "html", "per_layer_csv", "trace", "svg", "dot", "junit", "emit_asm", "db",
)  # fmt: skip
# The files vpuc reads: `vpuc compile /dev/zero` read the device until memory ran out.
READ_PATHS = ("model", "artifact", "inputs", "calib", "check", "float_model", "run")
# A full disk, a quota, a read-only file system: the machine's state, not vpuc's bug.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # in argparse's own output (--help, --version, usage)
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def console_main(argv: Sequence[str] | None = None) -> int:
    """The `vpuc` script's entry (and `python -m vpuc.compiler.cli`): main(), then the
    process ends without the interpreter's teardown, which frees every module and object one
    by one, TVM's among them: 0.2-0.27 s of CPU after a compile (docs/compile_time.md), a
    third of issue 23's 0.5 s after TVM's import. What an exit must do still happens:
    atexit's handlers run (tempfile's and weakref.finalize's cleanup, multiprocessing's
    joins, logging's flush) and stdout and stderr are flushed; every file vpuc writes is
    closed by then (Artifact.save and the reports write in `with` blocks). Where a thread
    that is not a daemon still runs (the interpreter would wait for it), or a flush fails,
    the ordinary exit runs instead. Given `argv`, it is main(argv) and returns the exit code:
    a caller running commands in its own process (the regression runner's worker loads this
    entry point and calls it once per step) goes on, and keeps its garbage collector whole
    (cli_commands.FREEZE_AFTER_IMPORTS)."""
    if argv is not None:
        return main(argv)
    commands.own_process()  # freezes a compile's imports, the collector paused until then
    code = main()
    if not isinstance(code, int) or _threads_running():
        sys.exit(code)
    try:
        atexit._run_exitfuncs()  # what CPython's own exit calls first; it clears what it ran
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe or stream: the ordinary exit reports it
        sys.exit(code)
    os._exit(code)


def _threads_running() -> bool:
    """Whether a thread that is not a daemon still runs (the interpreter's exit waits for it)."""
    main_thread = threading.main_thread()
    return any(t is not main_thread and t.is_alive() and not t.daemon for t in threading.enumerate())


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
    commands.collector_for(command)  # TVM's import starts on the next lines
    from vpuc.compiler.errors import CompileError, InternalError
    from vpuc.runtime.errors import USER_ERRORS
    from vpuc.targets import TargetError

    _rich_pipe_policy()
    try:
        _refuse_special_files(args)
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except (CompileError, TargetError, *USER_ERRORS) as exc:
        print(f"vpuc {command}: {exc}", file=sys.stderr)
        _json_error(args, str(exc), EXIT_USER_ERROR)
        return EXIT_USER_ERROR
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"vpuc {command}: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS:
            return _internal_error(command, args, exc)
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"vpuc {command}: cannot write its output{where}: {exc.strerror}", file=sys.stderr)
        _json_error(args, f"cannot write its output{where}: {exc.strerror}", EXIT_USER_ERROR)
        _silence_stdout()  # stdout may be the full device: the exit's flush must not fail again
        return EXIT_USER_ERROR
    except InternalError as exc:  # a known stage failed inside TVM: a bug, named
        _debug_traceback()
        print(f"vpuc {command}: internal error: {exc}; {BUG_HINT}", file=sys.stderr)
        _json_error(args, f"internal error: {exc}", EXIT_INTERNAL_ERROR)
        return EXIT_INTERNAL_ERROR
    except Exception as exc:
        return _internal_error(command, args, exc)


def _internal_error(command: str, args, exc: Exception) -> int:
    """A bug: one line, never a traceback unless asked."""
    _debug_traceback()
    message = " ".join(str(exc).split())[:500]
    print(f"vpuc {command}: internal error ({type(exc).__name__}: {message}); {BUG_HINT}",
          file=sys.stderr)  # fmt: skip
    _json_error(args, f"internal error ({type(exc).__name__}: {message})", EXIT_INTERNAL_ERROR)
    return EXIT_INTERNAL_ERROR


def _refuse_special_files(args) -> None:
    """A path read or written that exists as a device, a FIFO or a socket: a user error, before
    any work."""
    from vpuc.compiler.errors import CompileError

    for dest in (*WRITTEN_PATHS, *READ_PATHS):
        value = getattr(args, dest, None)
        if value == "-" and dest in WRITTEN_PATHS:  # a file named "-" is never what was meant
            flag = "-o" if dest == "output" else "--" + dest.replace("_", "-")
            raise CompileError(f"{flag} -: vpuc writes files, not standard output; give {flag} a file name")
        if not isinstance(value, str) or not value or not os.path.exists(value):
            continue
        if os.path.isfile(value) or os.path.isdir(value):
            continue
        flag = "-o" if dest == "output" else "--" + dest.replace("_", "-")
        hint = f"; give {flag} a file name" if dest in WRITTEN_PATHS else ""
        raise CompileError(f"{value}: is not a regular file (a device or a pipe){hint}")


def _json_error(args, message: str, code: int) -> None:
    """Under --json a script reads stdout: give it the error as a JSON object too."""
    if getattr(args, "json", False):
        import json

        try:
            print(json.dumps({"error": message, "exit_code": code}))
            sys.stdout.flush()
        except (OSError, ValueError):  # a closed pipe, a full device
            pass


def _rich_pipe_policy() -> None:
    """Rich answers a closed pipe with SystemExit(1), the code of a failed --check: make it raise
    BrokenPipeError instead, so the reader closing early exits 141 like every other output."""
    from rich.console import Console

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError

    Console.on_broken_pipe = on_broken_pipe


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


def _compile_then_html(args) -> int:
    """`vpuc compile --html FILE`: the compile, then the page of the artifact it wrote (the
    page's modules are imported only then)."""
    if args.html:
        from vpuc.runtime.report_html import check_output

        check_output(args.html)  # before the compile, not after it
    code = commands.compile_command(args)
    if code == 0 and args.html:
        from vpuc.runtime.report_html import write_report

        write_report(commands._artifact_path(args), args.html)
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vpuc", description="Compile ONNX models for the vpuc int8 VPU.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", help="compile an ONNX model into a .vpub artifact")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="cpu", help=TARGET_HELP)
    p.add_argument("-o", "--output", help="artifact to write (default: MODEL's name with .vpub)")
    add_input_shape(p)
    p.add_argument("--json", action="store_true", help="print the compile report as JSON")
    p.add_argument(
        "--per-layer-csv",
        metavar="FILE",
        help="write the estimate's per-layer figures (docs/metrics.md) as CSV",
    )
    p.add_argument(
        "--emit-asm", metavar="DIR", help="also write each VPU program as assembly (vpuc asm reads it)"
    )
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="leave out the QDQ reference `vpuc run --check` compares the VPU with (the check then fails)",
    )
    p.add_argument(
        "--reference",
        action="store_true",
        help="build the QDQ reference into the host library now (default: carried, built by run --check)",
    )
    add_pass_options(p)
    add_partition_options(p)
    add_calibration_options(p)
    p.add_argument(
        "--db", metavar="DIR",
        help="tuning database to apply (default: vpuc-tuning/<target> if it exists; docs/tuning.md)",
    )  # fmt: skip
    p.add_argument(
        "--html", metavar="FILE", help="also write the HTML report of the artifact (docs/report.md)"
    )
    p.set_defaults(handler=_compile_then_html)

    p = sub.add_parser("tune", help="tune a model's host kernels (MetaSchedule) into a tuning database")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="cpu", help=TARGET_HELP)
    p.add_argument(
        "--trials", type=int, metavar="N", help="candidates to measure in all (default 256 per task)"
    )
    p.add_argument(
        "--time-budget", type=float, metavar="SEC", help="stop after SEC seconds of search (default: none)"
    )
    p.add_argument("--db", metavar="DIR", help="tuning database to write (default: vpuc-tuning/<target>)")
    p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
    add_input_shape(p)
    p.add_argument("--json", action="store_true", help="print the outcome per task as JSON")
    add_partition_options(p)
    add_calibration_options(p)
    p.set_defaults(handler=commands.tune_command)

    p = sub.add_parser("calibrate-host", help="fit the partitioner's [host] cost figures to this machine")
    p.add_argument("--target", default="cpu", help=TARGET_HELP)
    p.add_argument("--db", metavar="DIR", help="time kernels with this tuning database's records")
    p.add_argument("--json", action="store_true", help="print every probe's figures as JSON")
    p.set_defaults(handler=commands.calibrate_host_command)

    p = sub.add_parser(
        "partition", help="report where each op runs (VPU or CPU) and why",
        description="Where each op runs (VPU or CPU) and why: the placement `vpuc compile` builds. "
        "A QDQ model is partitioned without running it (no accuracy measurement). A float model "
        "is calibrated first, as compile does, because its placement depends on the calibration: "
        "the accuracy floor (--min-sqnr, measured on the held-out samples) keeps layers in float, "
        "and the code generator judges the quantised module with its calibrated scales.",
    )  # fmt: skip
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="vpu", help="a VPU target name or .toml path (default: vpu)")
    add_input_shape(p)
    p.add_argument("--json", action="store_true", help="print the partition report as JSON")
    drawing = p.add_mutually_exclusive_group()
    drawing.add_argument("--svg", metavar="FILE", help="draw the partition as SVG (needs graphviz's dot)")
    drawing.add_argument("--dot", metavar="FILE", help="write the drawing as graphviz DOT source")
    add_partition_options(p)
    add_calibration_options(p)
    p.set_defaults(handler=commands.partition_command)

    p = sub.add_parser("optimize", help="run the graph passes and print the fusion audit")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default="cpu", help=TARGET_HELP)
    add_input_shape(p)
    p.add_argument("--json", action="store_true", help="print the audit as JSON")
    p.add_argument("--dump-after", metavar="PASS", help="print the Relax module after the pass PASS")
    add_pass_options(p)
    p.set_defaults(handler=commands.optimize_command)

    from vpuc.runtime import cli as runtime_cli

    runtime_cli.add_commands(sub)

    from vpuc.compiler.regress import cli as regress_cli

    regress_cli.add_command(sub)  # vpuc regress DIR: docs/regress.md

    from vpuc.compiler.sweep import cli as sweep_cli

    sweep_cli.add_command(sub)  # vpuc sweep MODEL --param ...: docs/sweep.md

    p = sub.add_parser("zoo", help="write the example models (ONNX) to a folder")
    p.add_argument("outdir", help="folder to write <name>.onnx files into")
    p.add_argument("--models", help="comma-separated subset (default: all)")
    p.set_defaults(handler=commands.zoo_command)

    p = sub.add_parser("targets", help="list the built-in targets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=commands.targets_command)
    return parser


if __name__ == "__main__":
    console_main()
