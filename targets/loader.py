"""Load and validate target TOML files (`targets/*.toml`, or any path the user gives).

A file may `inherit` another target (by built-in name or by a path relative to itself); the
child's tables are merged over the parent's key by key. Every problem is reported as
`TargetError("<file>: <key>: <what is wrong>")`.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from vpuc.targets.constraints import KEYED
from vpuc.targets.model import VECTOR_RATES, Hardware, HostOptions, Numerics, Target, TargetError
from vpuc.targets.ops import OP_KINDS

BUILTIN_DIR = Path(__file__).resolve().parent
KINDS = ("cpu", "vpu")
REQUANT_MODES = ("float32", "fixed_point")

# Allowed range of every hardware figure: (minimum, maximum), inclusive.
HARDWARE_RANGES: dict[str, tuple[int, int]] = {
    "clock_mhz": (1, 100_000),
    "mac_rows": (1, 1024),
    "mac_cols": (1, 1024),
    "sram_bytes": (1024, 1 << 34),
    "dram_bytes_per_cycle": (1, 1 << 16),
    "dram_latency_cycles": (0, 1 << 20),
    "host_link_bytes_per_cycle": (1, 1 << 16),
    "host_link_latency_cycles": (0, 1 << 24),
    "vector_lanes": (1, 4096),
    "lut_entries": (0, 65536),
    "dram_burst_bytes": (1, 1 << 16),
    "mac_weight_load_cycles": (1, 1 << 16),
    "issue_cycles": (0, 1 << 16),
    "sram_bytes_per_cycle": (1, 1 << 16),
    "mac_grouped_pixels_per_cycle": (1, 1024),
    "flash_bytes_per_cycle": (1, 1 << 16),
    "flash_latency_cycles": (0, 1 << 20),
    "flash_burst_bytes": (1, 1 << 16),
    "dram_outstanding": (1, 64),
    "vector_pool_block_h": (1, 64),
    "vector_pool_block_w": (1, 64),
    "flash_outstanding": (1, 64),
    "vector_reciprocal_cycles": (1, 1 << 16),
    "mac_fill_cycles": (0, 1 << 16),
    "mac_drain_cycles": (0, 1 << 16),
    "mac_row_slice": (0, 4096),
}
# The hardware keys that take one of a few words, and the words.
CHOICE_HARDWARE: dict[str, tuple[str, ...]] = {
    "weights_in": ("dram", "flash"),
    "feature_maps_in": ("sram", "dram"),
    "issue_order": ("after_wait", "before_wait"),
    "mac_load_order": ("after_wait", "before_wait"),
    "softmax_passes_in": ("sram", "dram"),
}
# Throughputs in elements per cycle: any positive number (U55's output unit does 0.75 cycles
# an element), at most the vector unit's lanes.
RATE_HARDWARE = (*VECTOR_RATES, "vector_mac_per_cycle")
OPTIONAL_HARDWARE = (
    "lut_entries",
    "dram_burst_bytes",
    "mac_weight_load_cycles",
    "issue_cycles",
    "sram_bytes_per_cycle",
    "mac_grouped_pixels_per_cycle",
    *RATE_HARDWARE,
    "weights_in",
    "feature_maps_in",
    "flash_bytes_per_cycle",
    "flash_latency_cycles",
    "flash_burst_bytes",
    "dram_outstanding",
    "flash_outstanding",
    "vector_pool_block_h",
    "vector_pool_block_w",
    "vector_reciprocal_cycles",
    "mac_fill_cycles",
    "mac_drain_cycles",
    "mac_row_slice",
    "issue_order",
    "mac_load_order",
    "softmax_passes_in",
)
TOP_LEVEL_TABLES = ("target", "hardware", "numerics", "host", "ops")


def builtin_target_names() -> list[str]:
    """Names of the targets shipped with vpuc (`targets/*.toml`)."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def resolve_target(target: str | Path | Target) -> Target:
    """A Target as given, or loaded by built-in name or path (what every API takes)."""
    return target if isinstance(target, Target) else load_target(target)


def load_target(name_or_path: str | Path) -> Target:
    """Load a target by built-in name ("vpu") or by the path of a TOML file."""
    path = _resolve(str(name_or_path), base=None)
    merged, chain = _load_merged(path, seen=())
    target = _build(path, merged, chain)
    if target.kind == "vpu" and not target.ops:  # every op would fall back to the CPU, silently
        raise TargetError(
            f"{path}: ops: a vpu target needs an op list ([ops.conv2d], ... as in targets/vpu.toml), "
            'or inherit one (inherit = "vpu")'
        )
    return target


def target_from_json(data: Any, where: str) -> Target:
    """A Target from its JSON form (Target.to_json, as manifests record it), validated like
    a TOML file; errors name `where` and the key."""
    if not isinstance(data, dict):
        raise TargetError(f"{where}: must be an object")
    meta = {k: data[k] for k in ("name", "kind", "description") if k in data}
    tables: dict[str, Any] = {"target": meta}
    for table in ("host", "numerics", "hardware", "ops"):
        if table in data:
            if not isinstance(data[table], dict):
                raise TargetError(f"{where}: {table}: must be an object")
            tables[table] = data[table]
    return _build(Path(where), tables, ())


def _resolve(ref: str, base: Path | None) -> Path:
    if ref.endswith(".toml") or "/" in ref or "\\" in ref:
        candidate = Path(ref) if base is None or Path(ref).is_absolute() else base / ref
        if not candidate.is_file():
            raise TargetError(f"{candidate}: target file not found")
        return candidate.resolve()
    builtin = BUILTIN_DIR / f"{ref}.toml"
    if not builtin.is_file():
        known = ", ".join(builtin_target_names())
        raise TargetError(f"unknown target '{ref}' (known: {known}; or give a path to a .toml)")
    return builtin


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise TargetError(f"{path}: cannot read: {exc.strerror}") from None


def _load_merged(path: Path, seen: tuple[Path, ...]) -> tuple[dict[str, Any], tuple[str, ...]]:
    if path in seen:
        cycle = " -> ".join(str(p) for p in (*seen, path))
        raise TargetError(f"{path}: target.inherit: inheritance cycle ({cycle})")
    data = _read(path)
    for key in data:
        if key not in TOP_LEVEL_TABLES:
            raise TargetError(f"{path}: {key}: unknown table (allowed: {', '.join(TOP_LEVEL_TABLES)})")
        if not isinstance(data[key], dict):
            raise TargetError(f"{path}: {key}: must be a table")
    parent_ref = data.get("target", {}).get("inherit")
    if parent_ref is None:
        return data, ()
    if not isinstance(parent_ref, str):
        raise TargetError(f"{path}: target.inherit: must be a string")
    parent_path = _resolve(parent_ref, base=path.parent)
    parent, chain = _load_merged(parent_path, (*seen, path))
    merged = _merge(parent, data)
    if "name" not in data.get("target", {}):  # never reported as the built-in it inherits
        merged["target"]["name"] = path.stem
    return merged, (*chain, parent_path.stem)


def _merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    out = {key: dict(value) for key, value in parent.items()}
    for table, values in child.items():
        out.setdefault(table, {})
        for key, value in values.items():
            old = out[table].get(key)
            if isinstance(old, dict) and isinstance(value, dict):
                out[table][key] = {**old, **value}
            else:
                out[table][key] = value
    out["target"].pop("inherit", None)
    return out


def _build(path: Path, data: dict[str, Any], chain: tuple[str, ...]) -> Target:
    meta = data.get("target", {})
    _check_keys(path, "target", meta, ("name", "kind", "description", "inherit"))
    name = _get(path, "target", meta, "name", str)
    kind = _get(path, "target", meta, "kind", str)
    if kind not in KINDS:
        raise TargetError(f"{path}: target.kind: '{kind}' is not one of {', '.join(KINDS)}")
    description = meta.get("description", "")
    hardware = _hardware(path, data.get("hardware")) if kind == "vpu" else None
    if kind == "cpu" and ("hardware" in data or data.get("ops")):
        table = "hardware" if "hardware" in data else "ops"
        raise TargetError(f"{path}: {table}: a cpu target has no VPU, so no [{table}] table")
    return Target(
        name=name,
        kind=kind,
        description=str(description),
        source=path,
        host=_host(path, data.get("host", {})),
        numerics=_numerics(path, data.get("numerics", {})),
        hardware=hardware,
        ops=_ops(path, data.get("ops", {}), hardware),
        inherits=chain,
    )


def _hardware(path: Path, table: dict[str, Any] | None) -> Hardware:
    if table is None:
        raise TargetError(f"{path}: hardware: a vpu target needs a [hardware] table")
    _check_keys(path, "hardware", table, (*HARDWARE_RANGES, *RATE_HARDWARE, *CHOICE_HARDWARE))
    values: dict[str, Any] = {}
    for f in fields(Hardware):
        if f.name not in table:
            if f.name in OPTIONAL_HARDWARE:
                continue
            raise TargetError(f"{path}: hardware.{f.name}: missing")
        if f.name in RATE_HARDWARE:
            values[f.name] = _rate(path, table, f.name)
            continue
        if f.name in CHOICE_HARDWARE:
            word = _get(path, "hardware", table, f.name, str)
            allowed = CHOICE_HARDWARE[f.name]
            if word not in allowed:
                raise TargetError(f"{path}: hardware.{f.name}: '{word}' is not one of {', '.join(allowed)}")
            values[f.name] = word
            continue
        value = _get(path, "hardware", table, f.name, int)
        low, high = HARDWARE_RANGES[f.name]
        if not low <= value <= high:
            raise TargetError(f"{path}: hardware.{f.name}: {value} is out of range [{low}, {high}]")
        values[f.name] = value
    _check_consistent(path, values)
    return Hardware(**values)


def _rate(path: Path, table: dict[str, Any], key: str) -> float:
    value = table[key]
    if key == "vector_mac_per_cycle" and value == 0 and not isinstance(value, bool):
        return 0.0  # none: vconv refused (a target's JSON form writes it out)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise TargetError(f"{path}: hardware.{key}: must be elements per cycle > 0, got {value!r}")
    return float(value)


def _check_consistent(path: Path, values: dict[str, Any]) -> None:
    """Figures that contradict each other: a unit faster than its own lanes or rows."""
    lanes = values["vector_lanes"]
    for key in RATE_HARDWARE:
        if values.get(key, 0) > lanes:
            raise TargetError(
                f"{path}: hardware.{key}: {values[key]:g} elements per cycle is more than the "
                f"vector unit's {lanes} lanes (hardware.vector_lanes)"
            )
    if values.get("weights_in") == "flash" and not values.get("flash_bytes_per_cycle"):
        raise TargetError(
            f"{path}: hardware.weights_in: weights are placed in flash but the target has no flash "
            "region (give hardware.flash_bytes_per_cycle, flash_latency_cycles, flash_burst_bytes)"
        )
    if values.get("flash_outstanding", 1) > 1 and not values.get("flash_bytes_per_cycle"):
        raise TargetError(
            f"{path}: hardware.flash_outstanding: transfers in flight on a flash port, but the "
            "target has no flash region (give hardware.flash_bytes_per_cycle, ...)"
        )
    row_slice = values.get("mac_row_slice", 0)
    if row_slice and values["mac_rows"] % row_slice:
        raise TargetError(
            f"{path}: hardware.mac_row_slice: {row_slice} channels a slice does not divide the "
            f"array's {values['mac_rows']} rows (hardware.mac_rows)"
        )
    grouped = values.get("mac_grouped_pixels_per_cycle", 1)
    if grouped > values["mac_rows"]:
        raise TargetError(
            f"{path}: hardware.mac_grouped_pixels_per_cycle: {grouped} pixels per cycle needs "
            f"more than the array's {values['mac_rows']} rows (hardware.mac_rows)"
        )


def _ops(path: Path, table: dict[str, Any], hardware: Hardware | None) -> dict[str, dict[str, Any]]:
    """The VPU op list: each kind known, each constraint key known with a valid limit."""
    ops = {}
    for kind, limits in table.items():
        if kind not in OP_KINDS:
            raise TargetError(f"{path}: ops.{kind}: unknown VPU op kind (known: {', '.join(OP_KINDS)})")
        if not isinstance(limits, dict):
            raise TargetError(f"{path}: ops.{kind}: must be a table")
        if limits.get("enabled", True) is False:
            continue
        for key, value in limits.items():
            if key != "enabled":
                _check_limit(path, f"ops.{kind}.{key}", key, value)
        if OP_KINDS[kind].unit == "lut" and (hardware is None or hardware.lut_entries < 256):
            entries = 0 if hardware is None else hardware.lut_entries
            raise TargetError(
                f"{path}: ops.{kind}: needs a 256-entry lookup table but hardware.lut_entries is {entries}"
            )
        ops[kind] = {k: v for k, v in limits.items() if k != "enabled"}
    return ops


def _check_limit(path: Path, where: str, key: str, value: Any) -> None:
    if key not in KEYED:
        raise TargetError(f"{path}: {where}: unknown constraint (known: enabled, {', '.join(KEYED)})")
    param = KEYED[key].param
    if param == "bool" and not isinstance(value, bool):
        raise TargetError(f"{path}: {where}: must be true or false, got {value!r}")
    if param == "range":
        valid = (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and 0 <= value[0] <= value[1]
        )
        if not valid:
            raise TargetError(f"{path}: {where}: bad range {value!r}; need [lo, hi] with 0 <= lo <= hi")


def _numerics(path: Path, table: dict[str, Any]) -> Numerics:
    _check_keys(path, "numerics", table, ("requant",))
    requant = table.get("requant", "float32")
    if requant not in REQUANT_MODES:
        raise TargetError(f"{path}: numerics.requant: '{requant}' is not one of {', '.join(REQUANT_MODES)}")
    return Numerics(requant=requant)


HOST_RANGES: dict[str, tuple[int, int]] = {
    "clock_mhz": (1, 100_000),
    "macs_per_cycle": (1, 1 << 16),
    "bytes_per_cycle": (1, 1 << 16),
    "op_overhead_cycles": (0, 1 << 24),
}


HOST_TARGET_KEYS = ("kind", "mtriple", "mcpu", "mattr", "num-cores")
HOST_KINDS = ("llvm",)


def _host(path: Path, table: dict[str, Any]) -> HostOptions:
    """[host]: a TVM CPU target (kind, mtriple, mcpu, mattr, num-cores; each left out is
    the compiling machine's) and the partitioner's CPU cost figures."""
    _check_keys(path, "host", table, ("llvm", *HOST_TARGET_KEYS, *HOST_RANGES))
    if "llvm" in table and table["llvm"] != "llvm":  # the older spelling of kind = "llvm"
        raise TargetError(
            f"{path}: host.llvm: TVM 0.27 takes no options in a target string; "
            f"write kind, mcpu, mattr and num-cores as keys of [host] (docs/targets.md)"
        )
    values: dict[str, Any] = {}
    kind = table.get("kind", "llvm")
    if kind not in HOST_KINDS:
        raise TargetError(f"{path}: host.kind: '{kind}' is not one of {', '.join(HOST_KINDS)}")
    values["kind"] = kind
    for key in ("mtriple", "mcpu"):
        if key in table:
            values[key] = _get(path, "host", table, key, str)
    if "mattr" in table:
        mattr = table["mattr"]
        if not isinstance(mattr, list) or not all(
            isinstance(a, str) and len(a) > 1 and a[0] in "+-" for a in mattr
        ):
            raise TargetError(
                f'{path}: host.mattr: must be a list of LLVM features such as ["+avx2", "-avx512f"], '
                f"got {mattr!r}"
            )
        values["mattr"] = tuple(mattr)
    if "num-cores" in table:
        cores = _get(path, "host", table, "num-cores", int)
        if not 1 <= cores <= 4096:
            raise TargetError(f"{path}: host.num-cores: {cores} is out of range [1, 4096]")
        values["num_cores"] = cores
    for key, (low, high) in HOST_RANGES.items():
        if key in table:
            value = _get(path, "host", table, key, int)
            if not low <= value <= high:
                raise TargetError(f"{path}: host.{key}: {value} is out of range [{low}, {high}]")
            values[key] = value
    return HostOptions(**values)


def _check_keys(path: Path, table: str, values: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in values:
        if key not in allowed:
            raise TargetError(f"{path}: {table}.{key}: unknown key (allowed: {', '.join(allowed)})")


def _get(path: Path, table: str, values: dict[str, Any], key: str, kind: type) -> Any:
    if key not in values:
        raise TargetError(f"{path}: {table}.{key}: missing")
    value = values[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise TargetError(f"{path}: {table}.{key}: must be an integer, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise TargetError(f"{path}: {table}.{key}: must be a string, got {value!r}")
    return value
