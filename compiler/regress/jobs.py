"""One regression job, as it travels to a worker and back.

`payload(job)` packs a job into plain data naming every file it needs (the model and its
external data, calibration and input .npz, a .toml target); `inline(payload)` replaces the
names by the files' bytes, so a Ray task runs it on another machine as a local worker runs
it here. `run_job(payload)` puts those files into a fresh folder, starts the worker
process (worker.py) with the job's timeout, and returns the job's result: its figures, or
why it failed. Paths of that folder are replaced by the suite's own in every message, so
results do not depend on where they ran.

Each worker runs single-threaded (TVM, OpenMP and BLAS threads = 1): figures never depend
on how many jobs run at once, and N workers use N cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from vpuc.compiler.regress.figures import check_failures, extract
from vpuc.compiler.regress.suite import Job

THREAD_VARIABLES = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_LIVE: set[subprocess.Popen] = set()  # worker processes of this process, for interrupt_all
_LIVE_LOCK = threading.Lock()


def payload(job: Job, has_vpu: bool) -> dict:
    """Everything a worker needs, as plain data; `files` maps each file's name in the job's
    folder to its path here (`inline` turns paths into contents)."""
    files = {f"model/{job.model_path.name}": str(job.model_path)}
    for name in _external_data(job.model_path):
        files[f"model/{name}"] = str(job.model_path.parent / name)
    shown = {f"model/{job.model_path.name}": str(job.model_path)}
    s = job.settings
    compile_args = [f"model/{job.model_path.name}", "--target", job.target, "-o", "model.vpub", "--json"]
    if job.target_path is not None:
        files["target.toml"] = str(job.target_path)
        compile_args[2] = "target.toml"
        shown["target.toml"] = str(job.target_path)
    for name, dims in s.get("input_shapes", {}).items():
        compile_args += ["--input-shape", f"{name}={'x'.join(map(str, dims))}"]
    if has_vpu:
        if "calib" in s:
            files["calib.npz"] = s["calib"]
            shown["calib.npz"] = s["calib"]
            compile_args += ["--calib", "calib.npz"]
        elif "calib_synthetic" in s:
            compile_args += ["--calib-synthetic", str(s["calib_synthetic"])]
        if "calib_method" in s:
            compile_args += ["--calib-method", s["calib_method"]]
        if "percentile" in s:
            compile_args += ["--percentile", str(s["percentile"])]
        if "min_subgraph_ops" in s:
            compile_args += ["--min-subgraph-ops", str(s["min_subgraph_ops"])]
        if s.get("profitability") is False:
            compile_args.append("--no-profitability")
        if s.get("reference") is False:
            compile_args.append("--no-reference")
    compile_args += s.get("compile_args", [])
    run_args = [
        "model.vpub",
        "--check",
        f"model/{job.model_path.name}",
        "--json",
        "--seed",
        str(s.get("seed", 0)),
    ]
    if "inputs" in s:
        files["inputs.npz"] = s["inputs"]
        shown["inputs.npz"] = s["inputs"]
        run_args += ["--inputs", "inputs.npz"]
    return {
        "model": job.model_id,
        "target": job.target,
        "files": files,
        "shown": shown,  # how messages name each file
        "compile": compile_args,
        "run": run_args,
        "timeout_s": job.timeout_s,
        "fault": s.get("fault"),
    }


def inline(job: dict) -> dict:
    """The payload with its files' contents instead of their paths (for another machine)."""
    return {**job, "files": {name: Path(path).read_bytes() for name, path in job.get("files", {}).items()}}


def _external_data(model: Path) -> list[str]:
    """Files the model's tensors keep their data in (beside the model)."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    names = set()
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            names.update(e.value for e in tensor.external_data if e.key == "location")
    return sorted(names)


def run_job(job: dict) -> dict:
    """Run one job's worker in a fresh folder; its result (never raises for the job's own
    failures: a compile error, a crash or a timeout is the result)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vpuc-regress-") as tmp:
        folder = Path(tmp)
        for name, source in job["files"].items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, bytes):
                (folder / name).write_bytes(source)
            else:
                shutil.copyfile(source, folder / name)
        spec = {"compile": job["compile"], "run": job["run"], "fault": job.get("fault")}
        (folder / "job.json").write_text(json.dumps(spec))
        try:
            outcome = _run_worker(folder, job["timeout_s"]) or _outcome(folder)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # the same failure in every executor
            outcome = _failed(f"internal error in vpuc regress ({type(exc).__name__}: {exc})")
        outcome = _shown(outcome, folder, job["shown"])
    return {
        "model": job["model"],
        "target": job["target"],
        **outcome,
        "elapsed_s": time.perf_counter() - start,
    }


def _run_worker(folder: Path, timeout_s: float) -> dict | None:
    """Start the worker and wait; a failure result if it died, hung or left no result."""
    env = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, "1")}
    log = folder / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vpuc.compiler.regress.worker", str(folder)],
            cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout ends everything it started
        )  # fmt: skip
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return _failed(f"timed out after {timeout_s:g} s (the worker was killed)")
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return _failed(f"the worker process died ({name}){_last_line(log.read_text(errors='replace'), ': ')}")
    if proc.returncode != 0 or not (folder / "result.json").is_file():
        tail = _last_line(log.read_text(errors="replace"), ": ")
        return _failed(f"the worker process exited with {proc.returncode} without a result{tail}")
    return None


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def interrupt_all() -> None:
    """Kill every worker process this process started (on Ctrl-C)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        _kill(proc)


def _failed(reason: str) -> dict:
    return {"status": "failed", "reason": reason, "figures": None}


def _outcome(folder: Path) -> dict:
    """The figures of a finished worker, or why the job failed."""
    steps = json.loads((folder / "result.json").read_text())
    compiled = steps["compile"]
    if compiled["exit"] != 0:
        return _failed(f"compile failed (exit {compiled['exit']}): {_last_line(compiled['stderr'])}")
    ran = steps.get("run")
    if ran is None or ran["exit"] not in (0, 1):
        code = ran["exit"] if ran else "?"
        return _failed(f"run failed (exit {code}): {_last_line(ran['stderr'] if ran else '')}")
    try:
        compile_report, run_report = json.loads(compiled["stdout"]), json.loads(ran["stdout"])
    except ValueError:
        return _failed("vpuc compile or run printed no JSON report (--json): a bug in vpuc")
    figures = extract(compile_report, run_report)
    timings = {"compile_s": round(compiled["wall_s"], 3), "run_s": round(ran["wall_s"], 3)}
    if ran["exit"] == 1:  # a failed --check, or non-finite outputs
        wrong = "; ".join(check_failures(run_report))
        reason = f"check failed: {wrong}" if wrong else f"run exited 1: {_last_line(ran['stderr'])}"
        return {"status": "failed", "reason": reason, "figures": figures, "timings": timings}
    return {"status": "ok", "reason": None, "figures": figures, "timings": timings}


def _last_line(text: str, prefix: str = "") -> str:
    """The last non-empty line (where a one-line vpuc error, or a traceback's end, is)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return prefix + lines[-1] if lines else ""


def _shown(outcome: dict, folder: Path, shown: dict[str, str]) -> dict:
    """Messages name the suite's files, not the worker's copies (one pass, longest first)."""
    if not outcome.get("reason"):
        return outcome
    names = {str(folder / name): original for name, original in shown.items()}
    names.update(shown)
    names[str(folder) + os.sep] = ""
    pattern = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    return {**outcome, "reason": re.sub(pattern, lambda m: names[m.group(0)], outcome["reason"])}
