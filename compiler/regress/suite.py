"""A regression suite on disk, read into jobs (one per model and target).

    DIR/regress.toml               defaults for every model of the suite (optional)
    DIR/**/<name>.onnx             a model
    DIR/**/<name>.regress.toml     its sidecar (optional): overrides the defaults key by key
                                   ([tolerance] key by key too)
    DIR/**/<name>.golden.json      its golden figures per target (`--update-golden` writes it)

Every sidecar is checked before any job runs: an unknown key, a wrong type or a file that
does not exist is a one-line error naming the file and the key (exit 2). docs/regress.md
lists the keys.
"""

from __future__ import annotations

import fnmatch
import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vpuc.compiler.errors import CompileError

SUITE_FILE = "regress.toml"
SIDECAR_SUFFIX = ".regress.toml"
GOLDEN_SUFFIX = ".golden.json"
DEFAULT_TARGETS = ("vpu",)
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_TOLERANCES: dict[str, float] = {
    "cycles": 0.02,  # relative: simulated and estimated cycles
    "bytes": 0.02,  # relative: DRAM read/write bytes, SRAM peak, host<->VPU transfer bytes
    "estimate": 0.02,  # absolute: |estimate - simulated| / simulated may grow by this much
    "sqnr_db": 0.5,  # absolute dB: an SQNR may drop by this much
    "top1": 0.0,  # absolute: top-1 agreement may drop by this much
    "lsb": 0.0,  # absolute: the largest LSB distance from the QDQ reference may grow by this much
    "exact_share": 0.01,  # absolute: the share of elements equal to the QDQ reference may drop by this
}
FAULTS = ("crash", "hang")  # for testing the runner: the job's worker dies, or never finishes


class SuiteError(CompileError):
    """A suite folder or sidecar vpuc cannot run (a user error: exit 2)."""


def _str(value) -> bool:
    return isinstance(value, str) and bool(value)


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _str_list(value) -> bool:
    return isinstance(value, list) and all(_str(v) for v in value)


def _shapes(value) -> bool:
    return isinstance(value, dict) and all(
        isinstance(dims, list) and dims and all(_int(d) and d > 0 for d in dims) for dims in value.values()
    )


# key: (check, what it must be)
KEYS: dict[str, tuple[Any, str]] = {
    "targets": (lambda v: _str_list(v) and bool(v), "a non-empty list of target names or .toml paths"),
    "input_shapes": (_shapes, "a table of input name = [positive dims]"),
    "calib": (_str, "the path of a calibration .npz (relative to this file)"),
    "calib_synthetic": (lambda v: _int(v) and v >= 1, "a number of synthetic samples >= 1"),
    "calib_method": (_str, "a calibration method (vpuc compile --help)"),
    "percentile": (lambda v: _number(v) and 0 < v <= 100, "a percentile in (0, 100]"),
    "min_subgraph_ops": (lambda v: _int(v) and v >= 1, "an integer >= 1"),
    "profitability": (lambda v: isinstance(v, bool), "true or false"),
    "reference": (lambda v: isinstance(v, bool), "true or false"),
    "compile_args": (_str_list, "a list of extra `vpuc compile` arguments"),
    "inputs": (_str, "the path of a run-input .npz (relative to this file)"),
    "seed": (lambda v: _int(v) and v >= 0, "a seed >= 0 for the run's random inputs"),
    "timeout_s": (lambda v: _number(v) and v > 0, "seconds > 0"),
    "tolerance": (lambda v: isinstance(v, dict), "a table of tolerances"),
    "fault": (lambda v: v in FAULTS, f"one of {', '.join(FAULTS)}"),
}
PATH_KEYS = ("calib", "inputs")
# Flags the runner sets itself from the keys above, refused in compile_args.
OWNED_FLAGS = (
    "-o", "--output", "--json", "--target", "--emit-asm", "--input-shape", "--calib", "--calib-synthetic",
    "--calib-method", "--percentile", "--min-subgraph-ops", "--no-profitability", "--no-reference",
)  # fmt: skip
# What the figures depend on: recorded in the golden, so a changed setting is named.
FIGURE_SETTINGS = (
    "input_shapes", "calib_synthetic", "calib_method", "percentile", "min_subgraph_ops", "profitability",
    "reference", "compile_args", "seed",
)  # fmt: skip


@dataclass(frozen=True)
class Job:
    """One model compiled and run for one target."""

    model_id: str  # the model's path under the suite folder, without .onnx
    model_path: Path
    target: str  # as the sidecar or --targets names it (the golden's key)
    target_path: Path | None  # a target given as a .toml file
    settings: dict[str, Any] = field(hash=False)  # the merged, checked sidecar keys
    tolerances: dict[str, float] = field(hash=False)
    golden_path: Path = Path()

    @property
    def name(self) -> str:
        return f"{self.model_id}@{self.target}"

    @property
    def timeout_s(self) -> float:
        return float(self.settings.get("timeout_s", DEFAULT_TIMEOUT_S))

    def file(self, key: str) -> Path | None:
        return Path(self.settings[key]) if key in self.settings else None

    def recorded_settings(self) -> dict[str, Any]:
        """What produced the figures: the settings that change them, and the files' sha256."""
        recorded = {key: self.settings[key] for key in FIGURE_SETTINGS if key in self.settings}
        for key in PATH_KEYS:
            if key in self.settings:
                recorded[f"{key}_sha256"] = sha256(Path(self.settings[key]))
        return recorded


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def discover(
    suite: str | Path, targets: list[str] | None = None, patterns: list[str] | None = None
) -> list[Job]:
    """The suite's jobs, sorted by model and then target in the order given. `targets`
    (--targets) restricts each model to those of its sidecar's targets it names (a model
    without `targets` runs on all of them); `patterns` (--models) are globs on model ids."""
    root = Path(suite)
    if not root.is_dir():
        raise SuiteError(f"{root}: not a folder")
    defaults = _read_sidecar(root / SUITE_FILE) if (root / SUITE_FILE).is_file() else {}
    models = sorted(
        p for p in root.rglob("*.onnx") if not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    if not models:
        raise SuiteError(f"{root}: no *.onnx model in this folder or below")
    jobs = []
    for model in models:
        model_id = model.relative_to(root).with_suffix("").as_posix()
        if patterns and not any(fnmatch.fnmatchcase(model_id, p) for p in patterns):
            continue
        sidecar = model.with_name(model.stem + SIDECAR_SUFFIX)
        own = _read_sidecar(sidecar) if sidecar.is_file() else {}
        settings = {**defaults, **own}
        tolerances = {**DEFAULT_TOLERANCES, **defaults.get("tolerance", {}), **own.get("tolerance", {})}
        settings.pop("tolerance", None)
        targets_base = settings.pop("targets_base", None)
        listed = settings.get("targets")
        chosen = [
            t for t in (targets or listed or DEFAULT_TARGETS) if not listed or not targets or t in listed
        ]
        for target in chosen:
            jobs.append(
                Job(
                    model_id,
                    model,
                    target,
                    _target_path(target, settings, targets_base),
                    settings,
                    tolerances,
                    model.with_name(model.stem + GOLDEN_SUFFIX),
                )  # fmt: skip
            )
    if not jobs:
        raise SuiteError(f"{root}: no job to run (check --models and --targets)")
    return jobs


def _read_sidecar(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    for key, value in data.items():
        if key not in KEYS:
            raise SuiteError(f"{path}: unknown key '{key}' (known: {', '.join(KEYS)})")
        check, expected = KEYS[key]
        if not check(value):
            raise SuiteError(f"{path}: '{key}' must be {expected}, got {value!r}")
    for key in PATH_KEYS:
        if key in data:
            file = (path.parent / data[key]).resolve()
            if not file.is_file():
                raise SuiteError(f"{path}: '{key}': {file} does not exist")
            data[key] = str(file)
    for name, value in data.get("tolerance", {}).items():
        if name not in DEFAULT_TOLERANCES:
            raise SuiteError(f"{path}: unknown tolerance '{name}' (known: {', '.join(DEFAULT_TOLERANCES)})")
        if not _number(value) or value < 0:
            raise SuiteError(f"{path}: tolerance '{name}' must be a number >= 0, got {value!r}")
    for arg in data.get("compile_args", []):
        if arg.split("=")[0] in OWNED_FLAGS:
            raise SuiteError(f"{path}: compile_args: '{arg}' is set by the runner (use the sidecar's key)")
    if data.get("calib") and data.get("calib_synthetic"):
        raise SuiteError(f"{path}: give 'calib' or 'calib_synthetic', not both")
    if "targets" in data:
        data["targets_base"] = str(path.parent)  # where its .toml targets are found
    return data


def _target_path(target: str, settings: dict, base: str | None) -> Path | None:
    """A target given as a .toml file: relative to the sidecar that lists it, or to the
    working directory when --targets names it."""
    if not target.endswith(".toml"):
        return None
    listed = base is not None and target in settings.get("targets", ())
    return (Path(base) if listed else Path.cwd()).joinpath(target).resolve()


def check_targets(jobs: list[Job]) -> dict[str, bool]:
    """Every target of the run loads (a bad one is a user error before any job runs);
    returns whether each has a VPU, by `target_key(job)`."""
    from vpuc.targets import load_target

    has_vpu = {}
    for job in jobs:
        if target_key(job) not in has_vpu:
            has_vpu[target_key(job)] = load_target(job.target_path or job.target).has_vpu
    return has_vpu


def target_key(job: Job) -> str:
    return str(job.target_path or job.target)
