"""Golden files: the figures a model is expected to reach, per target, beside the model.

    <name>.golden.json = {"format": "vpuc-regress-golden", "version": 1, "model": "<name>.onnx",
                          "targets": {<target>: {"figures": {...}, "settings": {...},
                                                 "model_sha256": "...", "vpuc_version": "..."}}}

`judge` compares one job's result with its golden entry (figures.compare) and says what the
job's status is; `update` writes the new figures of the jobs that passed, keeping every
other target's entry, and only touches a file whose content changes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from vpuc.compiler.regress.figures import compare
from vpuc.compiler.regress.suite import Job, SuiteError, sha256

FORMAT = "vpuc-regress-golden"
VERSION = 1
# A job's status, worst first: a report's summary counts them in this order.
STATUSES = ("failed", "regressed", "no golden", "worse", "better", "same")
FAILING = ("failed", "regressed", "no golden")


def read(path: Path, lenient: bool = False) -> dict:
    """A golden file's targets ({} when there is none). A file that is not a golden is a
    user error, unless `lenient` (--update-golden replaces it)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise ValueError(f"not a {FORMAT} version {VERSION} file")
        targets = data["targets"]
        if not isinstance(targets, dict) or not all(
            isinstance(t.get("figures"), dict) for t in targets.values()
        ):
            raise ValueError("'targets' must map each target to its 'figures'")
        return targets
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        if lenient:
            return {}
        raise SuiteError(f"{path}: unreadable golden ({exc}); fix it or rerun with --update-golden") from None


def judge(job: Job, result: dict, entry: dict | None, vpuc_version: str) -> dict:
    """The job's line of the report: status, every figure that is not the same, notes."""
    report = {
        "model": job.model_id,
        "target": job.target,
        "status": None,
        "reason": result.get("reason"),
        "figures": result.get("figures"),
        "changes": [],
        "counts": {},
        "notes": _notes(job, entry, vpuc_version) if entry else [],
        "timings": {"elapsed_s": round(result.get("elapsed_s", 0.0), 3), **result.get("timings", {})},
    }
    regressed = False
    if entry is not None and result.get("figures") is not None:
        changes = compare(entry["figures"], result["figures"], job.tolerances)
        report["changes"] = [c.to_json() for c in changes if c.status != "same"]
        report["counts"] = dict(Counter(c.status for c in changes))
        regressed = any(c.regression for c in changes)
    if result["status"] == "failed":
        report["status"] = "failed"
    elif entry is None:
        report["status"] = "no golden"
        report["reason"] = f"no golden figures for target '{job.target}' in {job.golden_path.name}"
    elif regressed:
        report["status"] = "regressed"
    else:
        counts = report["counts"]
        report["status"] = "worse" if counts.get("worse") else "better" if counts.get("better") else "same"
    return report


def _notes(job: Job, entry: dict, vpuc_version: str) -> list[str]:
    """What differs in how the golden was made (the figures may differ for that reason)."""
    notes = []
    if entry.get("model_sha256") and entry["model_sha256"] != sha256(job.model_path):
        notes.append("the model file changed since the golden was recorded")
    old, new = entry.get("settings", {}), job.recorded_settings()
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if changed:
        notes.append("settings changed since the golden: " + ", ".join(changed))
    if entry.get("vpuc_version") not in (None, vpuc_version):
        notes.append(f"golden recorded by vpuc {entry['vpuc_version']}, this is {vpuc_version}")
    return notes


def entry_for(job: Job, figures: dict, vpuc_version: str) -> dict:
    return {
        "figures": figures,
        "settings": job.recorded_settings(),
        "model_sha256": sha256(job.model_path),
        "vpuc_version": vpuc_version,
    }


def update(jobs_and_reports: list[tuple[Job, dict]], vpuc_version: str) -> list[dict]:
    """Write the figures of every job that did not fail into its golden file; returns one
    record per golden file: path, targets updated, whether the file changed."""
    by_file: dict[Path, list[tuple[Job, dict]]] = {}
    for job, report in jobs_and_reports:
        if report["status"] != "failed":
            by_file.setdefault(job.golden_path, []).append((job, report))
    written = []
    for path, entries in sorted(by_file.items()):
        targets = dict(read(path, lenient=True))
        for job, report in entries:
            targets[job.target] = entry_for(job, report["figures"], vpuc_version)
        document = {
            "format": FORMAT, "version": VERSION, "model": entries[0][0].model_path.name,
            "targets": dict(sorted(targets.items())),
        }  # fmt: skip
        text = json.dumps(document, indent=2, sort_keys=False) + "\n"
        changed = not path.is_file() or path.read_text() != text
        if changed:
            partial = path.with_name(path.name + ".partial")
            partial.write_text(text)
            partial.replace(path)
        written.append({"path": str(path), "targets": [job.target for job, _ in entries], "changed": changed})
    return written
