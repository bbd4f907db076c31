"""The compile's own partition judges the raw subgraphs the code generator refuses whole
(every binding: float ops the quantiser left on the CPU, matched again in their float form)
on the lower bound of their cycles where that suffices: they stay on the CPU whatever their
verdict, so their layers are not planned for its figures. Every other verdict keeps its
exact figures, and the placement is the exact rule's. Were the bound applied beyond the
refused subgraphs, or the refused set taken from a subgraph with one binding the code
generator accepts, these fail."""

from __future__ import annotations

import random
from types import SimpleNamespace

from test_profit_bound import assert_places_the_same
from test_profit_reprice import _random_case

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower.codegen import oracle
from vpuc.compiler.partition import placement, profit
from vpuc.targets import load_target


def test_refused_subgraphs_alone_are_judged_on_the_bound(monkeypatch):
    """Seeded graphs of test_profit_reprice, a seeded share of their subgraphs refused:
    against the exact rule (no subgraph refused), the same bindings blocked; the verdicts
    of subgraphs not refused equal, figures and reasons; a refused one's only where its
    bound sent it to the CPU, then with the same transfers and CPU time and cycles at most
    the exact ones."""
    target = load_target("vpu")
    rng = random.Random(25)
    planned = {"exact": 0, "refused": 0}
    by_bound = 0
    for _ in range(60):
        graph, raw, layer_cycles, estimated = _random_case(rng)
        least = {
            name: int(cycles * rng.choice((0.0, 0.5, 0.9, 1.0))) for name, cycles in layer_cycles.items()
        }
        subgraphs = sorted({c.subgraph for c in raw.composites})
        refused = frozenset(s for s in subgraphs if rng.random() < 0.5)
        min_ops = rng.choice((1, 1, 2))
        judged = {}
        for who, given in (("exact", frozenset()), ("refused", refused)):

            def answer(view, target, who=who, layer_cycles=layer_cycles):
                planned[who] += 1
                return SimpleNamespace(cycles=layer_cycles[view.name])

            monkeypatch.setattr(placement, "answer", answer)
            monkeypatch.setattr(placement, "least", lambda view, target, least=least: least[view.name])
            judged[who] = profit.judge(graph, raw, target, min_ops, dict(estimated), True, given)
        (exact_blocked, exact_verdicts), (blocked, verdicts) = judged["exact"], judged["refused"]
        assert set(blocked) == set(exact_blocked)
        for e, v in zip(exact_verdicts, verdicts, strict=True):
            if v.subgraph not in refused or not v.vpu_bound:
                assert v.to_json() == e.to_json()
                continue
            by_bound += 1
            assert (v.keep, v.transfer_s, v.cpu_s, v.onnx_ops) == (e.keep, e.transfer_s, e.cpu_s, e.onnx_ops)
            assert not v.keep and v.vpu_cycles <= e.vpu_cycles
            assert "(VPU >= " in v.reason or v.reason == e.reason  # (below min_ops: no figures)
    assert by_bound >= 30, by_bound
    assert planned["refused"] * 10 < planned["exact"] * 9, planned


def test_ocr_like_float_ops_left_by_the_quantiser(monkeypatch, zoo_dir):
    """transformer_encoder on vpu: the quantiser places nothing on the VPU (its subgraphs
    cost more there), so every op stays float and the code generator refuses every raw
    subgraph of the compile's partition. Against the exact rule (monkeypatched: nothing
    refused): the same ops on each device, subgraphs, boundaries and totals, the same
    decisions, the refused verdicts on the bound, fewer layers planned."""
    import vpuc.compiler.partition as partition_module

    model = zoo_dir / "transformer_encoder.onnx"
    real_judge = partition_module.judge
    planned = []
    real_plan = oracle._answer
    monkeypatch.setattr(oracle, "_answer", lambda view, target: planned.append(1) or real_plan(view, target))
    reports = {}
    for exact in (True, False):
        if exact:
            monkeypatch.setattr(partition_module, "judge", lambda *args: real_judge(*args[:6]))
        else:
            monkeypatch.setattr(partition_module, "judge", real_judge)
        oracle._ANSWERS.clear()
        planned.clear()
        prepared = prepare_model(model, "vpu", CompileOptions(calib_synthetic=4))
        reports[exact] = (prepared.partition.report, len(planned))
    (exact, exact_planned), (bounded, bounded_planned) = reports[True], reports[False]
    assert_places_the_same(exact, bounded)
    assert not any(v.get("vpu_cycles_are_a_lower_bound") for v in exact["profitability"])
    assert sum(bool(v.get("vpu_cycles_are_a_lower_bound")) for v in bounded["profitability"]) >= 5
    assert bounded_planned < exact_planned, (bounded_planned, exact_planned)


def test_refused_whole_means_every_binding():
    """A subgraph with one binding the code generator accepts is not refused whole (its
    verdict may keep that binding on the VPU); one with none of its bindings refused is not
    either."""
    from vpuc.compiler.partition import Placement, _refused_whole
    from vpuc.compiler.partition.graph import Composite

    raw = Placement(
        (
            Composite(0, "vpu.conv2d", ("a", "b")),
            Composite(0, "vpu.relu", ("c",)),
            Composite(1, "vpu.conv2d", ("d", "e")),
            Composite(1, "vpu.add", ("f",)),
            Composite(2, "vpu.relu", ("g",)),
        )
    )
    refusals = dict.fromkeys(("a", "b", "c", "d", "e", "x"), "float")
    assert _refused_whole(raw, refusals) == frozenset({0})
    assert _refused_whole(raw, {}) == frozenset()
