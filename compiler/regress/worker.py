"""The worker process of one regression job: `python -m vpuc.compiler.regress.worker JOBDIR`.

Reads JOBDIR/job.json ({"compile": [args], "run": [args], "fault": ...}), runs `vpuc
compile` and then `vpuc run` through the `vpuc` console script's entry point in this one
process (one TVM import per job; found through the installed package's metadata, so this
command, which the CLI calls, does not import the CLI), and writes JOBDIR/result.json
with each step's exit code, standard output (the --json report) and standard error. The
parent (jobs.py) reads that file; if this process dies or hangs, the parent sees it and the
job fails, not the run.

`fault` exists to test that: "crash" kills this process with SIGKILL, as the kernel's
out-of-memory killer would; "hang" sleeps until the parent's timeout ends it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import time
from importlib import metadata
from pathlib import Path


def main(argv: list[str]) -> int:
    jobdir = Path(argv[0])
    job = json.loads((jobdir / "job.json").read_text())
    if job.get("fault") == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if job.get("fault") == "hang":
        while True:
            time.sleep(3600)
    entry = _vpuc_entry()
    result = {}
    for step in ("compile", "run"):
        result[step] = _call(entry, [step, *job[step]])
        if result[step]["exit"] not in (0, 1) or (step == "compile" and result[step]["exit"] != 0):
            break  # run only what compiled; a failed --check (exit 1) still has its report
    partial = jobdir / "result.json.partial"
    partial.write_text(json.dumps(result))
    partial.replace(jobdir / "result.json")
    return 0


def _vpuc_entry():
    """The function the `vpuc` command runs (pyproject.toml's [project.scripts])."""
    (script,) = metadata.entry_points(group="console_scripts", name="vpuc")
    return script.load()


def _call(entry, args: list[str]) -> dict:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = entry(args)
        except SystemExit as exc:  # argparse refusing an argument exits 2 after its message
            code = exc.code if isinstance(exc.code, int) else 2
    return {
        "exit": code,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "wall_s": time.perf_counter() - start,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
