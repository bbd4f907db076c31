"""Run ONNX's backend node tests (onnx.backend.test.case.node) through `vpuc compile/run`.

    .venv/bin/python tests/onnx_node/run_node_tests.py [--jobs 2] [-k REGEX] [--json OUT]
        [--update-pass-list] [--check]

Prints the outcome of every case that does not pass, the totals, and the failures by op and
by category; writes every result to out/onnx_node_tests.json. `--check` exits 1 when a
case of tests/onnx_node/pass_list.txt no longer passes, or when any case gives a wrong
answer; `--update-pass-list` rewrites the list from this run (full runs only).
See docs/reliability.md and tests/onnx_node/node_harness.py for the outcomes.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from node_harness import OUTCOMES, PASS_LIST, CaseResult, case_ops, collect_cases, read_pass_list, run_case

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JSON = REPO / "out" / "onnx_node_tests.json"
CASE_TIMEOUT_S = 300
CASES_PER_WORKER = 40  # a fresh worker process now and then: TVM state does not pile up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("-k", dest="pattern", help="only cases whose name matches this regex")
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"results file (default {DEFAULT_JSON})"
    )
    parser.add_argument("--update-pass-list", action="store_true", help=f"rewrite {PASS_LIST.name}")
    parser.add_argument("--check", action="store_true", help="fail on a lost pass or any wrong answer")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case as it ends")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    cases = collect_cases(args.pattern)
    results = _run_all(cases, args.jobs, args.verbose)
    elapsed = time.perf_counter() - start
    _print_failures(results)
    summary = _summary(results, elapsed)
    _print_summary(summary)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"summary": summary, "cases": [r.to_json() for r in results]}, indent=1))
    print(f"results: {args.json}")
    if args.update_pass_list:
        if args.pattern:
            parser.error("--update-pass-list needs a full run (no -k)")
        passed = sorted(f"{r.name} {r.ops}" for r in results if r.outcome == "pass")
        header = (
            "# ONNX backend node tests vpuc passes (tests/onnx_node/run_node_tests.py --update-pass-list)\n"
        )
        PASS_LIST.write_text(header + "\n".join(passed) + "\n")
        print(f"{PASS_LIST}: {len(passed)} cases")
    if args.check:
        return _check(results)
    return 0


def _run_all(cases, jobs: int, verbose: bool) -> list[CaseResult]:
    context = multiprocessing.get_context("spawn")
    results = []
    with context.Pool(jobs, maxtasksperchild=CASES_PER_WORKER) as pool:
        pending = [(case, pool.apply_async(run_case, (case,))) for case in cases]
        for index, (case, future) in enumerate(pending, start=1):
            try:
                result = future.get(CASE_TIMEOUT_S)
            except multiprocessing.TimeoutError:
                result = CaseResult(
                    case.name, "crash", f"no answer in {CASE_TIMEOUT_S} s", case_ops(case), 0.0
                )
            except Exception as exc:  # the worker raised: a bug of the harness or of vpuc
                result = CaseResult(case.name, "crash", f"{type(exc).__name__}: {exc}", case_ops(case), 0.0)
            results.append(result)
            if verbose or index % 100 == 0:
                print(f"[{index}/{len(cases)}] {result.name}: {result.outcome}", flush=True)
    return results


def _summary(results: list[CaseResult], elapsed: float) -> dict:
    totals = collections.Counter(r.outcome for r in results)
    by_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        by_op[r.ops][r.outcome] += 1
    single = [r for r in results if r.ops not in ("expanded", "multi-node")]
    return {
        "cases": len(results),
        "totals": {outcome: totals.get(outcome, 0) for outcome in OUTCOMES},
        "single_op": {o: sum(r.outcome == o for r in single) for o in OUTCOMES},
        "categories": dict(collections.Counter(_category(r) for r in results if r.outcome != "pass")),
        "by_op": {op: dict(counter) for op, counter in sorted(by_op.items())},
        "seconds": round(elapsed, 1),
    }


def _category(result: CaseResult) -> str:
    """A coarse reason, for the failure table."""
    detail = result.detail
    if result.outcome == "refused":
        for key, label in (
            ("unsupported node", "op not supported"),
            ("not supported", "op configuration not supported"),
            ("not a tensor", "non-tensor input/output"),
            ("dynamic shape", "dynamic shape"),
            ("shape inference failed", "shape inference"),
            ("Relax import failed", "TVM importer failed"),
            ("host build", "host build failed"),
        ):
            if key in detail:
                return f"refused: {label}"
        return "refused: other"
    if result.outcome in ("wrong", "disputed"):
        kind = "shape" if "shape" in detail else "dtype" if "dtype" in detail else "values"
        return f"{result.outcome}: {kind}"
    return result.outcome


def _print_failures(results: list[CaseResult]) -> None:
    for r in results:
        if r.outcome != "pass":
            print(f"{r.outcome:8s} {r.name} [{r.ops}]: {r.detail[:300]}")


def _print_summary(summary: dict) -> None:
    print(f"\n{summary['cases']} cases in {summary['seconds']} s")
    print("totals:    " + ", ".join(f"{k} {v}" for k, v in summary["totals"].items()))
    print("single-op: " + ", ".join(f"{k} {v}" for k, v in summary["single_op"].items()))
    print("not passed, by category:")
    for category, count in sorted(summary["categories"].items(), key=lambda kv: -kv[1]):
        print(f"  {count:5d}  {category}")


def _check(results: list[CaseResult]) -> int:
    outcome = {r.name: r for r in results}
    lost = [outcome[name] for name in read_pass_list() if name in outcome and outcome[name].outcome != "pass"]
    wrong = [r for r in results if r.outcome == "wrong"]
    for r in lost:
        print(f"LOST: {r.name} is in {PASS_LIST.name} but now {r.outcome}: {r.detail}")
    for r in wrong:
        print(f"WRONG: {r.name}: {r.detail}")
    return 1 if lost or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
