"""The `vpuc` script ends without the interpreter's teardown (cli.console_main, issue 23:
0.2-0.27 s of CPU after a compile), and still does what an exit must: stdout and stderr
flushed into a pipe, atexit's handlers run, the command's exit code kept. Where a thread
that is not a daemon still runs, the ordinary exit (which waits for it) runs instead.

A child's __main__ holds an object whose __del__ writes "teardown": the interpreter's
teardown runs it, a process ended by os._exit never does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = """
import atexit, gc, os, sys, threading
from vpuc.compiler import cli

class Teardown:
    def __del__(self, write=os.write):
        write(1, b"\\nteardown\\n")

marker = Teardown()
atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0))  # runs last (atexit runs LIFO)
atexit.register(print, "\\natexit")  # buffered: lost unless flushed after the handlers
if os.environ.get("VPUC_TEST_THREAD"):
    threading.Thread(target=threading.main_thread().join).start()  # ends when the exit begins
sys.argv = ["vpuc", *sys.argv[1:]]
cli.console_main()
"""


def _child(*argv: str, thread: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe buffers
    if thread:
        env["VPUC_TEST_THREAD"] = "1"
    return subprocess.run(
        [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, timeout=120, env=env
    )


def test_targets_printed_whole_without_teardown():
    """The JSON printed into a pipe parses and names every built-in target, what an atexit
    handler printed is there, and the teardown never ran."""
    from vpuc.targets import builtin_target_names

    result = _child("targets", "--json")
    assert result.returncode == 0, result.stderr
    printed, rest = result.stdout.split("\natexit\n")
    names = {entry["name"] for entry in json.loads(printed)}
    assert names == set(builtin_target_names())
    assert "teardown" not in rest


def test_user_error_keeps_its_exit_code():
    result = _child("compile", "/nonexistent/model.onnx", "--target", "vpu", "-o", "/nonexistent/x.vpub")
    assert result.returncode == 2
    assert "vpuc compile: /nonexistent/model.onnx" in result.stderr
    assert "atexit" in result.stdout and "teardown" not in result.stdout


def test_running_thread_gets_the_ordinary_exit():
    """A thread that is not a daemon: the interpreter waits for it, then tears down."""
    result = _child("targets", thread=True)
    assert result.returncode == 0, result.stderr
    assert "atexit" in result.stdout and "teardown" in result.stdout


def test_entry_point_called_with_arguments_returns():
    """The regression runner's worker loads the `vpuc` entry point and calls it once per step
    in its own process (compiler/regress/worker.py): given arguments, it returns the code."""
    from importlib import metadata

    (script,) = metadata.entry_points(group="console_scripts", name="vpuc")
    code = "\n".join(
        [
            "from importlib import metadata",
            "(script,) = metadata.entry_points(group='console_scripts', name='vpuc')",
            "codes = [script.load()(['targets']), script.load()(['compile', '/nonexistent.onnx'])]",
            "print('codes', codes)",
        ]
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "codes [0, 2]"
    assert script.value == "vpuc.compiler.cli:console_main"


def test_compile_freezes_the_imports_only_in_its_own_process(tmp_path):
    """`vpuc compile` in its own process freezes what its imports made out of the garbage
    collector (cli_commands.FREEZE_AFTER_IMPORTS); called with arguments in a caller's
    process, it leaves the collector alone. (A model that is not ONNX: refused after the
    imports, exit 2.)"""
    model = tmp_path / "not_a_model.onnx"
    model.write_bytes(b"not a protobuf")
    argv = ("compile", str(model), "--target", "cpu", "-o", str(tmp_path / "x.vpub"))
    result = _child(*argv)
    assert result.returncode == 2, result.stderr
    assert "frozen True" in result.stdout
    code = "\n".join(
        [
            "import gc, sys",
            "from vpuc.compiler import cli",
            f"code = cli.console_main({list(argv)!r})",
            "print('code', code, 'frozen', gc.get_freeze_count() > 0)",
        ]
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip().splitlines()[-1] == "code 2 frozen False", result.stderr


PAUSED = """
import atexit, gc, sys
from vpuc.compiler import cli

before_freeze = []  # collections while nothing is frozen yet: during the imports
gc.callbacks.append(lambda phase, info: phase == "start" and gc.get_freeze_count() == 0 and before_freeze.append(1))
atexit.register(lambda: print("thresholds", gc.get_threshold()))
atexit.register(lambda: print("collections", len(before_freeze), "enabled", gc.isenabled()))
sys.argv = ["vpuc", *sys.argv[1:]]
before_freeze.clear()  # cli's own imports are light: counted from here
cli.console_main()
"""


def test_collector_paused_only_during_a_freezing_commands_imports(tmp_path):
    """`vpuc compile` in its own process runs no collection before its imports are frozen
    (cli_commands.own_process: importing TVM makes about 100,000 objects
    that live to the end) and collects again after them, a young collection per 200,000
    allocations (cli_commands.COMMAND_GC_THRESHOLDS); `vpuc targets` freezes nothing and
    leaves the collector on, at CPython's thresholds."""
    model = tmp_path / "not_a_model.onnx"
    model.write_bytes(b"not a protobuf")
    argv = ("compile", str(model), "--target", "cpu", "-o", str(tmp_path / "x.vpub"))
    result = subprocess.run([sys.executable, "-c", PAUSED, *argv], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout.strip().splitlines()[-2:] == ["collections 0 enabled True", "thresholds (200000, 30, 30)"]
    result = subprocess.run([sys.executable, "-c", PAUSED, "targets"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    enabled, thresholds = result.stdout.strip().splitlines()[-2:]
    assert enabled.endswith("enabled True") and thresholds == "thresholds (700, 10, 10)"  # CPython's defaults
