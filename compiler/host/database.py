"""The tuning database: a directory of MetaSchedule records that a project can commit.

    DIR/vpuc-tuning.json             what the records are for: format, host target, TVM
                                     version, and per tuned task its kernel, model and
                                     measured latency (default schedule vs tuned)
    DIR/database_workload.json       MetaSchedule's JSONDatabase: one workload per line
    DIR/database_tuning_record.json  and the best record per workload, one per line

`vpuc tune` writes it (only the best record per task, each checked against the default
schedule's outputs first); `vpuc compile` reads it. The default DIR is
`vpuc-tuning/<target name>` under the current directory (DEFAULT_ROOT), so records travel
with the project that holds them. Records are for one host target (kind, triple's
architecture, mcpu, mattr, num-cores): a database for another is ignored with a warning,
and a file that does not parse is refused with one line naming it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm

from vpuc.compiler import compat
from vpuc.compiler.errors import CompileError, last_line
from vpuc.compiler.host.target import HostTarget
from vpuc.runtime.artifact import follow_umask

DEFAULT_ROOT = "vpuc-tuning"
META = "vpuc-tuning.json"
WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
FORMAT, FORMAT_VERSION = "vpuc-tuning", 1


def default_db_dir(target_name: str) -> Path:
    """Where `vpuc tune` writes and `vpuc compile` looks when no --db is given."""
    return Path(DEFAULT_ROOT) / target_name


def target_identity(fields: dict[str, Any]) -> dict[str, Any]:
    """What makes records valid for a target: the CPU and the cores, not the triple's
    vendor/OS spelling (x86_64-pc-linux-gnu and x86_64-conda-linux-gnu run the same code)."""
    return {
        "kind": fields.get("kind"),
        "arch": str(fields.get("mtriple", "")).split("-", 1)[0],
        "mcpu": fields.get("mcpu"),
        "mattr": sorted(fields.get("mattr", [])),
        "num-cores": fields.get("num-cores"),
    }


@dataclass
class TuningDatabase:
    """An opened database directory and its MetaSchedule JSONDatabase."""

    path: Path
    meta: dict[str, Any]
    records: Any  # ms.database.JSONDatabase
    warnings: list[str] = field(default_factory=list)
    unreplayable: int = 0  # lookups whose record did not replay

    @property
    def tasks(self) -> dict[str, Any]:
        return self.meta.setdefault("tasks", {})

    def lookup(self, task_mod: tvm.IRModule, target: tvm.target.Target) -> tvm.tirx.PrimFunc | None:
        """The best recorded schedule of a task, applied to it; None when not recorded, or
        when the record does not replay on it: MetaSchedule matches kernels structurally,
        ignoring block names, but its traces find blocks by name, and a reduction's block
        is named after the model's tensor (the same kernel in two models can differ)."""
        if not self.records.has_workload(task_mod):
            return None
        try:
            sch = self.records.query_schedule(task_mod, target, "main")
        except Exception:  # ScheduleError: a block of the trace is named otherwise here
            self.unreplayable += 1
            return None
        if sch is None:
            return None
        return sch.mod["main"].with_attr("tirx.is_scheduled", True)


def open_database(path: str | Path, host: HostTarget, must_exist: bool) -> TuningDatabase | None:
    """Open DIR for reading. None (with `warnings`) when it is absent or for another target."""
    path = Path(path)
    meta_path = path / META
    if not meta_path.is_file():
        if must_exist:
            raise CompileError(f"{path}: no tuning database there (no {META}; `vpuc tune` writes one)")
        return None
    meta = _read_meta(meta_path)
    theirs, ours = target_identity(meta["host_target"]), target_identity(host.fields)
    if theirs != ours:
        db = TuningDatabase(path, meta, None)
        db.warnings.append(
            f"tuning database {path} is for {_describe(theirs)}, this build is for {_describe(ours)}: "
            "ignored (run `vpuc tune` for this target)"
        )
        return db
    return TuningDatabase(path, meta, _load_records(path))


def open_for_tuning(path: str | Path, host: HostTarget) -> TuningDatabase:
    """Open DIR for `vpuc tune`, creating it; refuses a database for another target."""
    path = Path(path)
    if (path / META).is_file():
        db = open_database(path, host, must_exist=True)
        if db.records is None:
            theirs = _describe(target_identity(db.meta["host_target"]))
            raise CompileError(f"{path}: holds records for another target ({theirs}); give another --db")
        return db
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CompileError(f"{path}: cannot create the tuning database: {exc.strerror}") from None
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "host_target": host.fields,
            "tvm": tvm.__version__, "tasks": {}}  # fmt: skip
    return TuningDatabase(path, meta, _load_records(path))


def save(db: TuningDatabase) -> None:
    """Write the best record of each workload and the meta file, each atomically."""
    ms = compat.metaschedule()
    with tempfile.TemporaryDirectory(prefix="vpuc-db-") as scratch:
        pruned = ms.database.JSONDatabase(
            path_workload=str(Path(scratch) / WORKLOADS), path_tuning_record=str(Path(scratch) / RECORDS),
            module_equality="structural",
        )  # fmt: skip
        db.records.dump_pruned(pruned)
        for name in (WORKLOADS, RECORDS):
            _replace(db.path / name, (Path(scratch) / name).read_bytes())
    _replace(db.path / META, json.dumps(db.meta, indent=2, sort_keys=True).encode())
    db.records = _load_records(db.path)


def forget(db: TuningDatabase, task_mods: list[tvm.IRModule]) -> None:
    """Remove the records (and meta entries) of these tasks and write the database."""
    ms = compat.metaschedule()
    kept = ms.database.MemoryDatabase(module_equality="structural")
    for record in db.records.get_all_tuning_records():
        if any(compat.structural_equal(record.workload.mod, mod) for mod in task_mods):
            continue
        workload = kept.commit_workload(record.workload.mod)
        kept.commit_tuning_record(
            ms.database.TuningRecord(record.trace, workload, record.run_secs, record.target, record.args_info)
        )
    for mod in task_mods:
        db.tasks.pop(str(compat.structural_hash(mod)), None)
    db.records = kept
    save(db)


def _replace(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    follow_umask(fd)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _describe(identity: dict[str, Any]) -> str:
    mattr = " " + ",".join(identity["mattr"]) if identity["mattr"] else ""
    return f"{identity['arch']} {identity['mcpu']}{mattr} num-cores={identity['num-cores']}"


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompileError(f"{path}: corrupt tuning database: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CompileError(f"{path}: corrupt tuning database: not a {FORMAT} file")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CompileError(
            f"{path}: tuning database version {meta.get('format_version')!r} is not supported "
            f"(this vpuc reads {FORMAT_VERSION})"
        )
    if not isinstance(meta.get("host_target"), dict) or not isinstance(meta.get("tasks", {}), dict):
        raise CompileError(f"{path}: corrupt tuning database: no host_target")
    return meta


def _load_records(path: Path) -> Any:
    """MetaSchedule's JSONDatabase over DIR, after checking every line parses: TVM's own
    reader aborts the process on some malformed input instead of raising."""
    workloads = _check_lines(path / WORKLOADS, expect_len=2)
    _check_lines(path / RECORDS, expect_len=2, max_workload=workloads)
    ms = compat.metaschedule()
    try:
        return ms.database.JSONDatabase(
            path_workload=str(path / WORKLOADS), path_tuning_record=str(path / RECORDS),
            module_equality="structural",
        )  # fmt: skip
    except Exception as exc:  # TVM raises its own error types
        raise CompileError(f"{path}: corrupt tuning database: {last_line(exc)}") from None


def _check_lines(path: Path, expect_len: int, max_workload: int | None = None) -> int:
    """Each line of a MetaSchedule JSON file is a JSON list of `expect_len` items; a
    record's first item indexes a workload. Returns the number of lines."""
    if not path.exists():
        return 0
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise CompileError(f"{path}: corrupt tuning database: {exc}") from None
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CompileError(f"{path}: line {number}: corrupt tuning database: {exc.msg}") from None
        if not isinstance(row, list) or len(row) != expect_len:
            raise CompileError(f"{path}: line {number}: corrupt tuning database: not a MetaSchedule entry")
        if max_workload is not None and not (isinstance(row[0], int) and 0 <= row[0] < max_workload):
            raise CompileError(f"{path}: line {number}: corrupt tuning database: unknown workload {row[0]!r}")
    return len(lines)
