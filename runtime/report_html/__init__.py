"""`vpuc report`: one self-contained HTML page of a compile and a run (docs/report.md).

It reads the artifact's report.json and manifest, an optional run JSON (`vpuc run --json`)
and an optional trace (`vpuc run --trace`), and draws them; it sits in the runtime because
it reads only the artifact format and JSON, never the compiler. A run of another artifact
(its sha256 differs) is refused naming both."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from vpuc.runtime.artifact import Artifact, ArtifactError
from vpuc.runtime.report_html.page import render


class ReportError(ArtifactError):
    """A run JSON or trace that does not fit the artifact; the message names the files."""


def build_html(
    artifact_path, run: dict | None = None, trace: dict | None = None, run_source: str = "run"
) -> str:
    artifact = Artifact.load(artifact_path)
    notes = []
    if run is not None:
        _check_run(artifact_path, run, run_source)
    else:
        notes.append(
            "no run given: simulated cycles, the timeline and the check are missing (vpuc run "
            "ARTIFACT --json --trace trace.json > run.json, then --run run.json --trace trace.json)"
        )
    return render(artifact.report, artifact.manifest, run, trace, notes)


def write_report(artifact_path, out, run: dict | None = None, trace: dict | None = None,
                 run_source: str = "run") -> Path:  # fmt: skip
    """Write the page atomically (a failure leaves no half-written file)."""
    out = check_output(out)
    html = build_html(artifact_path, run, trace, run_source)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".html.tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would make it, not mkstemp's 0600
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def check_output(out) -> Path:
    """Refuse a page path that cannot be written before any work is done for it."""
    out = Path(out)
    if out.is_dir():
        raise ReportError(f"{out}: is a directory; give a file name such as report.html")
    if not out.parent.is_dir():
        raise ReportError(f"{out}: its folder {out.parent} does not exist")
    return out


def load_json(path, what: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such {what}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: not a {what} (invalid JSON: {exc})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: not a {what} (not a JSON object)")
    return data


def _check_run(artifact_path, run: dict, source: str) -> None:
    identity = run.get("artifact")
    if not isinstance(identity, dict) or "sha256" not in identity:
        raise ReportError(
            f"{source}: names no artifact (no 'artifact.sha256'; written by `vpuc run --json`?)"
        )
    digest = hashlib.sha256(Path(artifact_path).read_bytes()).hexdigest()
    if identity["sha256"] != digest:
        raise ReportError(
            f"{source}: a run of {identity.get('path')} (sha256 {identity['sha256'][:12]}), not of "
            f"{artifact_path} (sha256 {digest[:12]})"
        )
    for key in ("cycles", "layers", "transfer_bytes", "host_ms"):
        if key not in run:
            raise ReportError(f"{source}: lacks '{key}' (not a `vpuc run --json` result)")
