"""The figures of one job and the rule each is compared by (docs/regress.md).

A job's figures are one flat dict, read from `vpuc compile --json` (the compile report)
and `vpuc run --check --json` (the run report); docs/metrics.md defines each source:

    ops.nodes / ops.cpu_ops / ops.vpu_ops       compile report totals                exact
    partition.<key>                             partition.totals (VPU targets)       exact
    cycles.total / cycles.vpu / cycles.link     run: simulated cycles                relative, `cycles`
    subgraph[i].cycles                          run: one VPU subgraph's cycles       relative, `cycles`
    dram_read_bytes / dram_write_bytes          run: sum over subgraphs              relative, `bytes`
    sram_peak_bytes                             run: max over subgraphs              relative, `bytes`
    subgraph[i].dram_read_bytes / ...           run: per subgraph                    relative, `bytes`
    transfer_bytes.to_vpu / .from_vpu           run: host<->VPU bytes                relative, `bytes`
    estimate.cycles                             compile: the code generator's total  relative, `cycles`
    estimate.error                              (estimate - simulated) / simulated   |x| absolute, `estimate`
    accuracy[out].sqnr_db / accuracy[out].top1  compile: held-out SQNR, top-1        floor, `sqnr_db`, `top1`
    check[out].sqnr_db                          run: vs onnxruntime on the float     floor, `sqnr_db`
                                                model, on the run's seeded inputs
    qdq[sg<i>/<out>].max_lsb                    run: LSB from the QDQ reference      ceiling, `lsb`
    qdq[sg<i>/<out>].exact_share                run: share equal to the reference    floor, `exact_share`
    check.passed                                run: --check passed                  exact

Lower is better for cycles, bytes, |estimate error| and LSB; higher for SQNR, top-1 and
exact share. An SQNR above SQNR_CAP_DB reads as SQNR_CAP_DB (float round-off, not
quantisation; null = outputs equal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SQNR_CAP_DB = 100.0
Figure = int | float | bool | None


def extract(compiled: dict, ran: dict) -> dict[str, Figure]:
    """The figures of one job from its compile and run reports."""
    figures: dict[str, Figure] = {f"ops.{k}": v for k, v in sorted(compiled.get("totals", {}).items())}
    partition = (compiled.get("partition") or {}).get("totals", {})
    figures.update({f"partition.{k}": v for k, v in sorted(partition.items()) if _is_count(v)})
    subgraphs = ran.get("subgraphs") or []
    if subgraphs:
        figures.update({f"cycles.{k}": ran["cycles"][k] for k in ("total", "vpu", "link")})
        figures["dram_read_bytes"] = sum(s["dram_read_bytes"] for s in subgraphs)
        figures["dram_write_bytes"] = sum(s["dram_write_bytes"] for s in subgraphs)
        figures["sram_peak_bytes"] = max(s["sram_peak_bytes"] for s in subgraphs)
        for key in ("to_vpu", "from_vpu"):
            figures[f"transfer_bytes.{key}"] = ran["transfer_bytes"][key]
        for s in subgraphs:
            for key in ("cycles", "dram_read_bytes", "dram_write_bytes", "sram_peak_bytes"):
                figures[f"subgraph[{s['id']}].{key}"] = s[key]
    estimate = (compiled.get("vpu") or {}).get("total")
    if estimate:
        figures["estimate.cycles"] = estimate["cycles"]
        simulated = ran["cycles"]["vpu"] if subgraphs else 0
        figures["estimate.error"] = (
            round((estimate["cycles"] - simulated) / simulated, 4) if simulated else None
        )
    for out in (compiled.get("accuracy") or {}).get("outputs", []):
        figures[f"accuracy[{out['name']}].sqnr_db"] = out["sqnr_db"]
        if out.get("top1_agreement") is not None:
            figures[f"accuracy[{out['name']}].top1"] = out["top1_agreement"]
    check = ran.get("check") or {}
    for out in (check.get("float") or {}).get("outputs", []):
        sqnr = out.get("sqnr_db")
        figures[f"check[{out['name']}].sqnr_db"] = None if sqnr is None else round(sqnr, 3)
    for out in (check.get("qdq") or {}).get("outputs", []):
        if out.get("missing"):
            continue
        key = f"qdq[sg{out['subgraph']}/{out['output']}]"
        figures[f"{key}.max_lsb"] = out["max_lsb"]
        figures[f"{key}.exact_share"] = round(out["exact_share"], 6)
    if check:
        figures["check.passed"] = bool(check.get("passed"))
    return figures


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _layer(row: dict) -> str:
    return f" layer '{row['layer']}'" if row.get("layer") else ""


def check_failures(ran: dict) -> list[str]:
    """What `--check` found wrong, one phrase per failing output."""
    check = ran.get("check") or {}
    found = []
    float_part = check.get("float") or {}
    for out in float_part.get("outputs", []):
        if out.get("passed", True):
            continue
        if "sqnr_floor_db" in out:
            floor = out["sqnr_floor_db"]
            found.append(f"output '{out['name']}' SQNR {fmt(out['sqnr_db'])} dB below its floor {floor} dB")
        else:
            limit = float_part.get("tolerance_rel_err")
            found.append(f"output '{out['name']}' relative error {out['rel_err']:.3g} above {limit}")
    qdq = check.get("qdq") or {}
    for out in qdq.get("outputs", []):
        if not out.get("passed", True) and out.get("missing"):
            found.append(f"subgraph {out['subgraph']}: {out['missing']}")
        elif not out.get("passed", True):
            found.append(
                f"subgraph {out['subgraph']}{_layer(out)} output '{out['output']}' "
                f"{out['max_lsb']} LSB from the QDQ "
                f"reference (tolerance {qdq.get('tolerance_lsb')})"
            )
    model = check.get("qdq_model") or {}
    for out in model.get("outputs", []):
        if not out.get("passed", True):
            found.append(
                f"output '{out['name']}' {out['max_lsb']} LSB from onnxruntime on the QDQ model "
                f"(tolerance {model.get('tolerance_lsb')})"
            )
    return found


# --- comparison ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    kind: str  # "exact", "relative" (tolerance a fraction of the golden) or "absolute"
    lower_is_better: bool = True
    tolerance: str | None = None  # the DEFAULT_TOLERANCES key
    magnitude: bool = False  # compare |value| (the estimate's signed error)
    cap: float | None = None  # values above it read as it (SQNR); None reads as it too


EXACT = Rule("exact")


def rule(figure: str) -> Rule:
    """How `figure` is compared."""
    if figure.startswith(("ops.", "partition.")) or figure == "check.passed":
        return EXACT
    if figure == "estimate.error":
        return Rule("absolute", True, "estimate", magnitude=True)
    if figure.endswith("cycles") or figure.startswith("cycles."):
        return Rule("relative", True, "cycles")
    if figure.endswith("_bytes") or figure.startswith("transfer_bytes."):
        return Rule("relative", True, "bytes")
    if figure.endswith(".sqnr_db"):
        return Rule("absolute", False, "sqnr_db", cap=SQNR_CAP_DB)
    if figure.endswith(".top1"):
        return Rule("absolute", False, "top1")
    if figure.endswith(".max_lsb"):
        return Rule("absolute", True, "lsb")
    if figure.endswith(".exact_share"):
        return Rule("absolute", False, "exact_share")
    return EXACT  # a figure this version does not know: any change counts


@dataclass(frozen=True)
class Change:
    """One figure of one job against its golden value."""

    figure: str
    golden: Figure
    new: Figure
    status: str  # same, better, worse (within tolerance), regressed, changed (exact), new, missing
    delta: str  # new - golden, for people ("+410 (+2.95%)")
    tolerance: str  # what it was judged by ("2%", "0.5 dB", "exact")

    @property
    def regression(self) -> bool:
        return self.status in ("regressed", "changed", "missing")

    def to_json(self) -> dict:
        return {
            "figure": self.figure, "golden": self.golden, "new": self.new, "status": self.status,
            "delta": self.delta, "tolerance": self.tolerance,
        }  # fmt: skip


def compare(golden: dict[str, Figure], new: dict[str, Figure], tolerances: dict[str, float]) -> list[Change]:
    """Every figure of either side, in the new figures' order, then those only the golden has."""
    names = list(new) + [name for name in golden if name not in new]
    return [_compare_one(name, golden, new, tolerances) for name in names]


def _compare_one(name: str, golden: dict, new: dict, tolerances: dict[str, float]) -> Change:
    r = rule(name)
    allowed = tolerances.get(r.tolerance, 0.0) if r.tolerance else 0.0
    label = _tolerance_label(name, r, allowed)
    if name not in golden:
        return Change(name, None, new[name], "new", "", label)
    if name not in new:
        return Change(name, golden[name], None, "missing", "", label)
    old, now = golden[name], new[name]
    if old == now:
        return Change(name, old, now, "same", _delta(name, old, now), label)
    if r.kind == "exact" or not (_comparable_value(old, r) and _comparable_value(now, r)):
        return Change(name, old, now, "changed", _delta(name, old, now), label)
    a, b = _comparable(old, r), _comparable(now, r)
    if a == b:
        return Change(name, old, now, "same", _delta(name, old, now), label)
    worse_by = (b - a) if r.lower_is_better else (a - b)
    if worse_by < 0:
        status = "better"
    else:
        if r.kind == "relative":
            worse_by = worse_by / abs(a) if a else math.inf
        status = "worse" if worse_by <= allowed + 1e-12 else "regressed"
    return Change(name, old, now, status, _delta(name, old, now), label)


def _comparable_value(value, r: Rule) -> bool:
    """A number, or null where null has a meaning (an SQNR of equal outputs)."""
    return _numeric(value) or (value is None and r.cap is not None)


def _numeric(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _comparable(value, r: Rule) -> float:
    if value is None:  # SQNR of equal outputs
        return r.cap if r.cap is not None else math.inf
    value = abs(value) if r.magnitude else value
    return min(value, r.cap) if r.cap is not None else value


def _tolerance_label(name: str, r: Rule, allowed: float) -> str:
    if r.kind == "exact":
        return "exact"
    if r.kind == "relative":
        return f"{allowed * 100:g}%"
    if r.tolerance == "sqnr_db":
        return f"{allowed:g} dB"
    if r.tolerance == "estimate":
        return f"{allowed * 100:g} points"
    return f"{allowed:g}"


def fmt(value) -> str:
    """A figure as the report prints it."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _delta(name: str, old, new) -> str:
    if not _numeric(old) or not _numeric(new):
        return "" if old == new else f"{fmt(old)} -> {fmt(new)}"
    diff = new - old
    if name == "estimate.error":
        return f"{diff * 100:+.2f} points"
    text = f"{diff:+d}" if isinstance(diff, int) else f"{diff:+.4g}"
    if name.endswith(".sqnr_db"):
        text += " dB"
    if old and rule(name).kind == "relative":
        text += f" ({diff / old * 100:+.2f}%)"
    return text
