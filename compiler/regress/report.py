"""What `vpuc regress` shows: the table of changed figures, one line per job, the summary,
a progress bar while jobs run, and JUnit XML for CI systems."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from vpuc.compiler.regress.figures import fmt
from vpuc.compiler.regress.golden import STATUSES

STYLES = {"failed": "bold red", "regressed": "bold red", "changed": "bold red", "missing": "bold red",
          "no golden": "red", "worse": "yellow", "better": "green", "new": "cyan", "same": ""}  # fmt: skip


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=200)


def print_report(report: dict) -> None:
    console = _console()
    jobs = report["jobs"]
    rows = [(job, change) for job in jobs for change in job["changes"]]
    if rows:
        table = Table(title="Figures that differ from the goldens", title_justify="left")
        for column in ("model", "target", "figure", "golden", "new", "delta", "status"):
            table.add_column(column, justify="right" if column in ("golden", "new", "delta") else "left")
        for job, c in rows:
            status = c["status"] if c["status"] == "new" else f"{c['status']} ({_tolerance(c)})"
            shown = f"[{STYLES[c['status']]}]{status}[/]" if STYLES[c["status"]] else status
            table.add_row(escape(job["model"]), escape(job["target"]), escape(c["figure"]), fmt(c["golden"]),
                          fmt(c["new"]), c["delta"], shown)  # fmt: skip
        console.print(table)
    table = Table(title=escape(f"vpuc regress {report['suite']}: {len(jobs)} job(s)"), title_justify="left")
    for column in ("model", "target", "result", "figures", "time (s)", "reason / notes"):
        table.add_column(column, overflow="fold")
    for job in jobs:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(job["counts"].items(), key=_by_severity))
        why = "; ".join(filter(None, [job["reason"], *job["notes"]]))
        style = STYLES.get(job["status"], "")
        table.add_row(escape(job["model"]), escape(job["target"]),
                      f"[{style}]{job['status']}[/]" if style else job["status"],
                      counts or "-", f"{job['timings']['elapsed_s']:.1f}", escape(why))  # fmt: skip
    console.print(table)
    for golden in report.get("goldens", []):
        verb = "updated" if golden["changed"] else "unchanged"
        console.print(escape(f"{verb}: {golden['path']} ({', '.join(golden['targets'])})"))
    better = sum(job["counts"].get("better", 0) for job in jobs)
    if better and not report["update_golden"]:
        console.print(f"{better} figure(s) better than their goldens: --update-golden records them")
    console.print(summary_line(report))


def _change_line(c: dict) -> str:
    return (
        f"{c['figure']}: {fmt(c['golden'])} -> {fmt(c['new'])} {c['delta']} {c['status']} ({_tolerance(c)})"
    )


def _tolerance(change: dict) -> str:
    return "exact" if change["tolerance"] == "exact" else f"tolerance {change['tolerance']}"


def _by_severity(item) -> int:
    order = ("changed", "missing", "regressed", "worse", "new", "better", "same")
    return order.index(item[0]) if item[0] in order else len(order)


def summary_line(report: dict) -> str:
    counts = report["summary"]
    parts = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts.get(s))
    return f"{sum(counts.values())} job(s): {parts}; exit {report['exit_code']}"


def summary(jobs: list[dict]) -> dict[str, int]:
    counts = Counter(job["status"] for job in jobs)
    return {status: counts[status] for status in STATUSES if counts[status]}


class JobProgress:
    """A progress bar on a terminal (stderr), else one line per finished job on stderr."""

    def __init__(self, total: int, quiet: bool = False) -> None:
        self.total, self.done, self.quiet = total, 0, quiet
        self.console = Console(stderr=True)
        self.bar = None
        if self.console.is_terminal and not quiet:
            self.bar = Progress(
                TextColumn("vpuc regress"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.description}"), console=self.console, transient=True,
            )  # fmt: skip
            self.task = self.bar.add_task("", total=total)

    def __enter__(self) -> JobProgress:
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar:
            self.bar.stop()

    def finished(self, job: dict) -> None:
        self.done += 1
        line = f"{job['model']}@{job['target']}: {job['status']} ({job['timings']['elapsed_s']:.1f} s)"
        if self.bar:
            self.bar.update(self.task, advance=1, description=escape(f"last: {line}"))
        elif not self.quiet:
            print(f"vpuc regress: [{self.done}/{self.total}] {line}", file=sys.stderr, flush=True)


def write_junit(report: dict, path: str | Path) -> None:
    """One testsuite, one testcase per job (classname = model, name = target): regressions
    and missing goldens are <failure> (not with --update-golden, which records them), jobs
    that did not finish are <error>; other changes are the testcase's <system-out>."""
    jobs = report["jobs"]
    failing = () if report["update_golden"] else ("regressed", "no golden")
    suite = ET.Element(
        "testsuite", name=f"vpuc regress {report['suite']}", tests=str(len(jobs)),
        failures=str(sum(j["status"] in failing for j in jobs)),
        errors=str(sum(j["status"] == "failed" for j in jobs)),
        time=f"{sum(j['timings']['elapsed_s'] for j in jobs):.3f}",
    )  # fmt: skip
    for job in jobs:
        case = ET.SubElement(
            suite, "testcase", classname=f"regress.{job['model']}", name=job["target"],
            time=f"{job['timings']['elapsed_s']:.3f}",
        )  # fmt: skip
        changes = [c for c in job["changes"] if c["status"] not in ("better", "new")]
        details = "\n".join(_change_line(c) for c in changes)
        if job["status"] == "failed":
            element = ET.SubElement(case, "error", message=job["reason"] or "failed", type="failed")
            element.text = details or None
        elif job["status"] in failing:  # with --update-golden the new figures were recorded
            bad = ", ".join(
                c["figure"] for c in changes if c["status"] in ("regressed", "changed", "missing")
            )
            message = job["reason"] or f"regressed: {bad}"
            ET.SubElement(case, "failure", message=message, type=job["status"]).text = details or None
        elif details or job["notes"]:
            ET.SubElement(case, "system-out").text = "\n".join([*job["notes"], details]).strip()
    root = ET.Element("testsuites", name="vpuc regress")
    root.append(suite)
    ET.indent(root)
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))
    partial.replace(path)
