"""The roofline bound of a layer or a VPU program on a target: the one definition, read by
the code generator's report (`vpu.layers[].roofline` in report.json, compiler/lower/codegen/
emit.py), the HTML report (runtime/report_html) and bench/roofline.py (docs/metrics.md).

The bound is a lower bound on this machine: the busiest of its three units working at its
peak on work no program can skip,

    max(MACs / (mac_rows x mac_cols),
        compulsory DRAM bytes / dram_bytes_per_cycle,
        vector cycles: elements / the target's vector_<kind>_per_cycle)

and on a target whose vector unit multiply-accumulates (vector_mac_per_cycle = v > 0, the
vconv instruction, depthwise only) the MAC term is the two units' together: depthwise MACs
may run on either unit, so it becomes max(other MACs / (rows x cols), (MACs + v x vector
cycles) / (rows x cols + v)) (in T cycles the array does at most rows x cols x T MACs and
the vector unit v x (T - its other work)).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vpuc.targets.model import Hardware

# per kind of layer: the vector work of one output element, as (rate's name, passes)
_RATES = {
    "mac": ("vector_requant_per_cycle",),  # each int32 result is requantised once
    "rescale": ("vector_requant_per_cycle",),
    "add": ("vector_add_per_cycle",),
    "mul": ("vector_mul_per_cycle",),
    "lut": ("vector_lut_per_cycle",),
    "pool": ("vector_pool_per_cycle",),  # per window tap
    "softmax": ("vector_clip_per_cycle", "vector_lut_per_cycle", "vector_mul_per_cycle"),
}


@dataclass(frozen=True)
class Work:
    """The work of a layer (or of a program: the sums over its layers) no program can skip."""

    macs: int = 0
    depthwise_macs: int = 0  # of `macs`, those of depthwise layers (vconv may take them)
    compulsory_bytes: int = 0  # weights once + the tensors that cross DRAM
    vector_cycles: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(
            self.macs + other.macs,
            self.depthwise_macs + other.depthwise_macs,
            self.compulsory_bytes + other.compulsory_bytes,
            self.vector_cycles + other.vector_cycles,
        )


def vector_cycles(hw: Hardware, kind: str, elements: int, taps: int = 1) -> float:
    """Cycles the vector unit needs at least for a layer of `kind` ("mac" for conv, dense and
    matmul) writing `elements` int8 outputs; a pool's `taps` are its window's elements, a
    softmax's elements pass the clip, lookup and multiply rates once each. 0 for a layer
    with no vector work (concat, reshape)."""
    names = _RATES.get(kind, ())
    per_element = taps if kind == "pool" else 1
    return sum(elements * per_element / getattr(hw, name) for name in names)


def mac_cycles(hw: Hardware, work: Work) -> float:
    """Cycles the MAC work needs at least: on the array alone, or, where the vector unit
    multiply-accumulates too, the depthwise part on either unit (the vector unit's time less
    its other work)."""
    alone = work.macs / hw.macs_per_cycle
    v = hw.vector_mac_per_cycle
    if not v or not work.depthwise_macs:
        return alone
    together = (work.macs + v * work.vector_cycles) / (hw.macs_per_cycle + v)
    return max((work.macs - work.depthwise_macs) / hw.macs_per_cycle, together)


@dataclass(frozen=True)
class Bound:
    """The three terms of the bound in cycles, the bound (their maximum) and its name."""

    mac_cycles: float
    dram_cycles: float
    vector_cycles: float

    @property
    def cycles(self) -> float:
        return max(self.mac_cycles, self.dram_cycles, self.vector_cycles)

    @property
    def bound_by(self) -> str:
        terms = {"MAC": self.mac_cycles, "DRAM": self.dram_cycles, "vector": self.vector_cycles}
        return max(terms, key=terms.get)


def bound(hw: Hardware, work: Work) -> Bound:
    """The roofline bound of `work` on `hw` (the module's docstring)."""
    return Bound(mac_cycles(hw, work), work.compulsory_bytes / hw.dram_bytes_per_cycle, work.vector_cycles)


def to_json(hw: Hardware, work: Work) -> dict:
    """report.json's `roofline` of a layer: its work, the bound's terms, the bound and the
    term that sets it (docs/metrics.md)."""
    found = bound(hw, work)
    terms = {"mac_cycles": round(found.mac_cycles, 1), "dram_cycles": round(found.dram_cycles, 1)}
    return {**asdict(work), **terms, "bound_cycles": round(found.cycles, 1), "bound_by": found.bound_by}


def from_json(figures: dict) -> Work:
    """The work of a layer from its report.json `roofline`."""
    return Work(*(figures[name] for name in ("macs", "depthwise_macs", "compulsory_bytes", "vector_cycles")))
