"""`vpuc regress DIR`: run a regression suite and compare it with its goldens.

compiler/cli.py builds the parser and calls `add_command`. Exit 0 when no job regressed or
failed, 1 when one did (or has no golden), 2 for a user error (a bad sidecar, target or
option: before any job runs), 3 for a bug in vpuc.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace

EXIT_REGRESSION = 1


def add_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "regress",
        help="compile and run every model of a folder per target, compare with the goldens (docs/regress.md)",
    )
    p.add_argument("suite", metavar="DIR", help="folder of *.onnx models (with sidecars and goldens)")
    p.add_argument(
        "--targets", help="comma-separated targets (default: each model's sidecar targets, else vpu)"
    )
    p.add_argument("--models", help="comma-separated glob patterns of model names to run (default: all)")
    p.add_argument("--update-golden", action="store_true", help="write the new figures into the goldens")
    p.add_argument(
        "-j", "--jobs", type=int, default=None, metavar="N",
        help="jobs at once: local worker processes (default 1), or with --ray the local instance's CPUs",
    )  # fmt: skip
    p.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="run the jobs as Ray tasks: a local Ray instance, or the cluster at ADDRESS (needs vpuc[ray])",
    )  # fmt: skip
    p.add_argument(
        "--timeout", type=float, default=None, metavar="S",
        help="seconds a job may take before its worker is killed (default 900; a sidecar's timeout_s wins)",
    )  # fmt: skip
    p.add_argument("--junit", metavar="FILE", help="also write the results as JUnit XML")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=regress_command)


def regress_command(args) -> int:
    from vpuc.compiler.driver import VPUC_VERSION
    from vpuc.compiler.regress import execute, golden, jobs, report, suite

    _check_options(args)
    patterns = _split(args.models)
    found = suite.discover(args.suite, _split(args.targets), patterns)
    if args.timeout is not None:
        found = [_with_timeout(j, args.timeout) for j in found]
    has_vpu = suite.check_targets(found)
    goldens = {path: golden.read(path, lenient=args.update_golden) for path in {j.golden_path for j in found}}
    payloads = [jobs.payload(j, has_vpu[suite.target_key(j)]) for j in found]
    by_key = {(j.model_id, j.target): j for j in found}
    judged: dict[tuple[str, str], dict] = {}
    start = time.perf_counter()

    with report.JobProgress(len(found), quiet=False) as progress:

        def on_result(result: dict) -> None:
            job = by_key[(result["model"], result["target"])]
            entry = goldens[job.golden_path].get(job.target)
            judged[(job.model_id, job.target)] = line = golden.judge(job, result, entry, VPUC_VERSION)
            progress.finished(line)

        if args.ray is not None:
            executor = execute.run_ray(payloads, args.ray or None, args.jobs, on_result)
        else:
            executor = execute.run_local(payloads, args.jobs or 1, on_result)
    lines = [judged[(j.model_id, j.target)] for j in found]
    written = (
        golden.update([(j, judged[(j.model_id, j.target)]) for j in found], VPUC_VERSION)
        if args.update_golden
        else []
    )
    for line in lines if args.update_golden else ():
        if line["status"] == "no golden":
            line["reason"] = f"no golden for target '{line['target']}' before: recorded"
    failing = ("failed",) if args.update_golden else golden.FAILING
    code = EXIT_REGRESSION if any(line["status"] in failing for line in lines) else 0
    result = {
        "suite": args.suite,
        "update_golden": args.update_golden,
        "jobs": lines,
        "summary": report.summary(lines),
        "goldens": written,
        "exit_code": code,
        "executor": executor,
        "wall_s": round(time.perf_counter() - start, 3),
    }
    if args.junit:
        report.write_junit(result, args.junit)
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        report.print_report(result)
    return code


def _with_timeout(job, timeout_s: float):
    """--timeout is the default: a sidecar's own timeout_s wins."""
    return (
        job
        if "timeout_s" in job.settings
        else replace(job, settings={**job.settings, "timeout_s": timeout_s})
    )


def _check_options(args) -> None:
    from vpuc.compiler.regress.suite import SuiteError

    if args.jobs is not None and args.jobs < 1:
        raise SuiteError(f"--jobs: must be at least 1, got {args.jobs}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise SuiteError(f"--timeout: must be a number of seconds > 0, got {args.timeout}")


def _split(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None
