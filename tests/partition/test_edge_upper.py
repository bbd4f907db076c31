"""The edge rule decided on an upper bound where it suffices (edges.judge_move, oracle.most)
places every layer as the rule on the exact cycles does: a layer stays on the VPU on the
bound only when its move saves nothing even at the bound, so nothing at its exact cycles
either. The reference is the same partition with the bound switched off (every edge layer
planned alone in full), both from empty memos, on QDQ models (their compile prices whole
subgraphs by the raw cut's programs, so the edge layers are not planned alone before the
edge rule asks), with the host made faster than its figures (its CPU seconds scaled) so
that edge layers move in some cases and stay in others."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from vpuc.compiler.driver import CompileOptions, partition_and_lower, prepare_front
from vpuc.compiler.lower import memo
from vpuc.compiler.lower.codegen import oracle, tile_mac
from vpuc.compiler.partition import edges

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "tinyconv": ROOT.parent / "shared" / "anchors" / "tinyconv" / "tinyconv_int8_qdq.onnx",
    "resnet8": ROOT.parent / "shared" / "anchors" / "resnet8" / "resnet8_int8_qdq.onnx",
    "tflite_dscnn": ROOT / "tests" / "fixtures" / "tf2onnx" / "tflite_dscnn.onnx",
}
HOST_SPEEDS = (0.05, 0.1, 0.15, 1.0)  # factors on the host's CPU seconds


def _partitioned(front, monkeypatch, factor: float, bounded: bool) -> tuple[dict, list, int]:
    """(the partition report, the programs' estimates, how many edge layers were planned
    alone in full), from empty memos."""
    real_cpu, real_exact = edges.cpu_seconds, edges.vpu_cycles_of
    planned = []
    monkeypatch.setattr(edges, "cpu_seconds", lambda g, names, t: real_cpu(g, names, t) * factor)
    monkeypatch.setattr(edges, "vpu_cycles_of", lambda g, ls, t: planned.append(1) or real_exact(g, ls, t))
    if not bounded:
        monkeypatch.setattr(edges, "vpu_cycles_upper_of", lambda g, ls, t: None)
    for held in (oracle._ANSWERS, memo._LOWERED, tile_mac._CHOSEN, tile_mac._BOUNDED):
        held.clear()  # nothing planned before: the bound is asked first, as in a first compile
    prepared = copy.copy(front)
    prepared.timings = dict(front.timings)
    partition_and_lower(prepared, CompileOptions())
    monkeypatch.undo()
    return prepared.partition.report, [p.estimate for p in prepared.programs], len(planned)


@pytest.mark.parametrize(
    ("name", "target"),
    [("tinyconv", "vpu"), ("tinyconv", "u55-256"), ("resnet8", "vpu"), ("tflite_dscnn", "vpu")],
)
def test_the_bound_places_every_layer_as_the_exact_rule(monkeypatch, name, target):
    if not MODELS[name].is_file():
        pytest.skip(f"{MODELS[name]} is not on this machine")
    front = prepare_front(MODELS[name], target, CompileOptions())
    on_vpu, decided = set(), 0
    for factor in HOST_SPEEDS:
        exact = _partitioned(front, monkeypatch, factor, bounded=False)
        bound = _partitioned(front, monkeypatch, factor, bounded=True)
        assert bound[:2] == exact[:2], factor
        on_vpu.add(sum(row["device"] == "vpu" for row in exact[0]["ops"]))
        decided += bound[2] < exact[2]
    if target == "vpu":  # layers move at some host speeds, not at others
        assert len(on_vpu) > 1, on_vpu
    assert decided > 0  # the bound decided edge layers without planning them in full
