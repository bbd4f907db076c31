"""The fusion audit and the ONNX provenance of bindings, carried on the IRModule itself.

Every pass in compiler/pipeline.py is a pure IRModule -> IRModule function, so what a pass
learns travels with the module as two module attributes (JSON text):

    vpuc.provenance   {Relax var name: [ONNX node labels]}  which ONNX nodes a binding computes
    vpuc.audit        [{pattern, nodes, reason, fused}]      each fusion made or refused
    vpuc.layout       {choice, reason, ...}                  the layout pass's decision

A fused entry's reason says what the nodes became ("nn.layer_norm(axis -1, eps 1e-05)"); a
near miss's reason says why they were not fused ("eps is not a constant").

The provenance comes from the named import (passes/provenance.py): every binding is named
after the ONNX node that produced it and maps to that node. A pass that fuses bindings gives
the fused binding the union of their nodes, so a later pass still speaks ONNX names. A
binding no ONNX node accounts for (a transpose ConvertLayout inserted) maps to
"(inserted by <pass>)"; a var missing from the map reads "(unnamed)".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import tvm

from vpuc.compiler import compat

PROVENANCE_ATTR = "vpuc.provenance"
AUDIT_ATTR = "vpuc.audit"
LAYOUT_ATTR = "vpuc.layout"
ATTRS = (PROVENANCE_ATTR, AUDIT_ATTR, LAYOUT_ATTR)
UNNAMED = "(unnamed)"


@dataclass(frozen=True)
class AuditEntry:
    """One fusion made (`fused`) or refused (`not_fused`), in ONNX node names."""

    pattern: str
    nodes: tuple[str, ...]
    reason: str
    fused: bool

    def to_json(self) -> dict:
        return {"pattern": self.pattern, "nodes": list(self.nodes), "reason": self.reason}


@dataclass
class Audit:
    """The audit and provenance read from a module; `attach` writes them onto another."""

    provenance: dict[str, list[str]] = field(default_factory=dict)
    entries: list[AuditEntry] = field(default_factory=list)
    layout: dict = field(default_factory=dict)

    @classmethod
    def of(cls, mod: tvm.IRModule) -> Audit:
        provenance, entries, layout = (_json_attr(mod, key) for key in ATTRS)
        return cls(
            provenance=provenance or {},
            entries=[
                AuditEntry(e["pattern"], tuple(e["nodes"]), e["reason"], e["fused"]) for e in entries or []
            ],
            layout=layout or {},
        )

    def attach(self, mod: tvm.IRModule) -> tvm.IRModule:
        entries = [asdict(e) for e in self.entries]
        for key, value in zip(ATTRS, (self.provenance, entries, self.layout), strict=True):
            mod = mod.with_attr(key, json.dumps(value))
        return mod

    def nodes(self, names: Iterable[str]) -> tuple[str, ...]:
        """ONNX node labels of the given var names, in order, without repeats."""
        labels: dict[str, None] = {}
        for name in names:
            for label in self.provenance.get(name, [UNNAMED]):
                labels[label] = None
        return tuple(labels)

    def fused(self, pattern: str, names: Iterable[str], became: str) -> None:
        self.entries.append(AuditEntry(pattern, self.nodes(names), became, True))

    def not_fused(self, pattern: str, names: Iterable[str], reason: str) -> None:
        entry = AuditEntry(pattern, self.nodes(names), reason, False)
        if entry not in self.entries:
            self.entries.append(entry)

    def derive(self, new_name: str, from_names: Iterable[str]) -> None:
        """`new_name` computes what the `from_names` bindings computed."""
        self.provenance[new_name] = list(self.nodes(from_names))

    def insert(self, new_name: str, by_pass: str) -> None:
        self.provenance[new_name] = [f"(inserted by {by_pass})"]

    def to_json(self) -> dict[str, list[dict]]:
        return {
            "fused": [e.to_json() for e in self.entries if e.fused],
            "not_fused": [e.to_json() for e in self.entries if not e.fused],
        }


def _json_attr(mod: tvm.IRModule, key: str):
    text = compat.module_attr(mod, key)
    return None if text is None else json.loads(str(text))


def strip_audit(mod: tvm.IRModule) -> tvm.IRModule:
    """The module without the vpuc attributes (for building, printing and comparing)."""
    attrs = mod.attrs
    if attrs is None or not any(k in ATTRS for k in attrs.keys()):
        return mod
    kept = {k: attrs[k] for k in attrs.keys() if k not in ATTRS}
    return tvm.IRModule(mod.functions, attrs=kept or None)


def fresh_name(taken: set[str], base: str) -> str:
    """`base`, or `base_1`, `base_2`, ... : the first name not in `taken` (then taken)."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name
