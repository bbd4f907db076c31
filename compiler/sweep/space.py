"""The design space of `vpuc sweep`: --param KEY=v1,v2,... into points, each point a Target.

A parameter is a hardware figure (a field of targets.model.Hardware, read from the
dataclass, so a figure another change adds is sweepable at once; its allowed range is the
loader's) or `ops.<kind>` = on/off (the VPU op list; `on` adds the kind with no limits when
the base lacks it). Values are integers with an optional K, M or G (x1024) suffix.

The points are the full grid (at most MAX_GRID_POINTS), or --samples N drawn from it at
random or as a Latin hypercube (each parameter's values covered evenly), seeded. Each point
becomes a target derived from the base by `target_from_json`, validated like any TOML file;
`point_toml` writes it as a TOML file that `vpuc compile --target` reads.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass, fields, replace

from vpuc.compiler.errors import CompileError
from vpuc.targets import Target
from vpuc.targets.loader import HARDWARE_RANGES, target_from_json
from vpuc.targets.model import Hardware
from vpuc.targets.ops import OP_KINDS

MAX_GRID_POINTS = 100_000
SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# Figures a target may leave out, derived from others (targets/model.py): when the base's
# value is the derived one, a point derives it again from its own figures (mac_rows=32 loads
# a weight block in 32 cycles, as vpu-plus.toml says).
DERIVED_FIGURES = ("dram_burst_bytes", "mac_weight_load_cycles")
SWITCHES = {"on": True, "off": False, "true": True, "false": False}


class SweepError(CompileError):
    """A bad --param, --samples or sweep option (the CLI answers in one line, exit 2)."""


@dataclass(frozen=True)
class Param:
    """One swept parameter and its values, in the order given."""

    key: str
    values: tuple


Point = dict  # parameter key -> value, in --param order


def sweepable() -> list[str]:
    """Every parameter a sweep may vary (hardware figures, then ops.<kind>)."""
    return [f.name for f in fields(Hardware)] + [f"ops.{kind}" for kind in OP_KINDS]


def parse_param(text: str) -> Param:
    """KEY=v1,v2,... checked: a known key, each value in the figure's range."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not values.strip():
        raise SweepError(f"--param {text}: give KEY=v1,v2,... (e.g. mac_rows=8,16,32)")
    if key not in sweepable():
        raise SweepError(f"--param {key}: unknown parameter (known: {', '.join(sweepable())})")
    parsed = tuple(_value(key, v.strip()) for v in values.split(",") if v.strip())
    if len(set(parsed)) != len(parsed):
        raise SweepError(f"--param {key}: a value is given twice")
    return Param(key, parsed)


def _value(key: str, text: str):
    if key.startswith("ops."):
        if text.lower() not in SWITCHES:
            raise SweepError(f"--param {key}={text}: an op is on or off")
        return SWITCHES[text.lower()]
    scale = SUFFIXES.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        value = int(digits) * scale
    except ValueError:
        raise SweepError(f"--param {key}={text}: not an integer (64K, 1M and 2G are allowed)") from None
    low, high = HARDWARE_RANGES.get(key, (0, 1 << 62))
    if not low <= value <= high:
        raise SweepError(f"--param {key}={text}: {value} is out of range [{low}, {high}]")
    return value


def check_params(params: list[Param]) -> None:
    keys = [p.key for p in params]
    for key in keys:
        if keys.count(key) > 1:
            raise SweepError(f"--param {key}: given twice; list all its values in one --param")


def grid_size(params: list[Param]) -> int:
    return math.prod(len(p.values) for p in params)


def points(
    params: list[Param], samples: int | None = None, latin: bool = False, seed: int = 0
) -> list[Point]:
    """The grid, or `samples` distinct points of it (random or Latin hypercube)."""
    check_params(params)
    size = grid_size(params)
    if samples is None:
        if size > MAX_GRID_POINTS:
            sizes = " x ".join(f"{p.key} {len(p.values)}" for p in params)
            raise SweepError(
                f"--param: the grid has {size:,} points ({sizes}), over {MAX_GRID_POINTS:,}; "
                "give --samples N (with --latin for a Latin hypercube)"
            )
        return [dict(zip([p.key for p in params], combo, strict=True)) for combo in _grid(params)]
    if samples < 1:
        raise SweepError(f"--samples: must be at least 1, got {samples}")
    if samples >= size:
        return points(params)
    rng = random.Random(seed)
    draw = _latin if latin else _random
    return draw(params, samples, rng)


def _grid(params: list[Param]):
    return itertools.product(*(p.values for p in params))


def _random(params: list[Param], samples: int, rng: random.Random) -> list[Point]:
    chosen: dict[tuple, None] = {}
    while len(chosen) < samples:
        chosen[tuple(rng.choice(p.values) for p in params)] = None
    return [dict(zip([p.key for p in params], combo, strict=True)) for combo in chosen]


def _latin(params: list[Param], samples: int, rng: random.Random) -> list[Point]:
    """N points, each parameter's range cut into N strata and each stratum used once
    (McKay, Beckman and Conover 1979), mapped onto the parameter's listed values; a
    repeated point is redrawn (at most 100 times, then filled at random)."""
    chosen: dict[tuple, None] = {}
    for _ in range(100):
        columns = []
        for p in params:
            strata = list(range(samples))
            rng.shuffle(strata)
            columns.append([p.values[int((s + rng.random()) / samples * len(p.values))] for s in strata])
        for combo in zip(*columns, strict=True):
            if len(chosen) < samples:
                chosen[combo] = None
        if len(chosen) == samples:
            break
    while len(chosen) < samples:
        chosen[tuple(rng.choice(p.values) for p in params)] = None
    return [dict(zip([p.key for p in params], combo, strict=True)) for combo in chosen]


def point_id(point: Point) -> str:
    """A short name of a point, the same in every run (its parameters' hash)."""
    return hashlib.sha256(json.dumps(point, sort_keys=True).encode()).hexdigest()[:10]


def point_target(base: Target, point: Point) -> Target:
    """The base target with the point's parameters, validated like a target file."""
    data = base.to_json()
    data["name"] = f"{base.name}-{point_id(point)}"
    data["description"] = f"{base.name} with " + ", ".join(f"{k}={v}" for k, v in point.items())
    data["hardware"] = dict(data.get("hardware", {}))
    data["ops"] = {kind: dict(limits) for kind, limits in data.get("ops", {}).items()}
    for key, value in point.items():
        if key.startswith("ops."):
            kind = key.removeprefix("ops.")
            if value:
                data["ops"].setdefault(kind, {})
            else:
                data["ops"].pop(kind, None)
        else:
            data["hardware"][key] = value
    for name in DERIVED_FIGURES:  # a figure the loader derived from another follows it
        derived = replace(base.hardware, **{name: 0})
        if name not in point and getattr(derived, name) == getattr(base.hardware, name):
            del data["hardware"][name]
    return target_from_json(data, f"sweep point {data['name']}")


def point_toml(target: Target) -> str:
    """The target as a TOML file (what `vpuc compile --target FILE` reads back)."""
    data = target.to_json()
    lines = ["[target]", f"name = {_toml(data['name'])}", 'kind = "vpu"']
    lines.append(f"description = {_toml(data['description'])}")
    for table in ("hardware", "numerics", "host"):
        lines += ["", f"[{table}]"] + [f"{k} = {_toml(v)}" for k, v in data[table].items()]
    for kind, limits in data.get("ops", {}).items():
        lines += ["", f"[ops.{kind}]"] + [f"{k} = {_toml(v)}" for k, v in limits.items()]
    return "\n".join(lines) + "\n"


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):  # the timing figures (issue 21) are rates
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")
