"""The profitability rule without exact figures (the quantiser's partitions, whose reports
nobody reads) sends a subgraph to the CPU on a lower bound of its cycles when that alone
suffices, without planning its layers: the same placements as the exact rule, fewer layers
planned, and each such verdict labelled as a bound. Were the bound ever above the cycles
it bounds, a subgraph the exact rule keeps on the VPU could move: these fail then."""

from __future__ import annotations

import random
from types import SimpleNamespace

from test_profit_reprice import _random_case

from vpuc.compiler.lower.codegen import oracle
from vpuc.compiler.partition import placement, profit
from vpuc.targets import load_target


def _same_decisions(exact, bounded) -> int:
    """Asserts the placements and every exactly judged verdict equal; returns how many
    verdicts the bound decided."""
    (exact_blocked, exact_verdicts), (bounded_blocked, bounded_verdicts) = exact, bounded
    assert set(bounded_blocked) == set(exact_blocked)
    by_bound = 0
    for e, b in zip(exact_verdicts, bounded_verdicts, strict=True):
        if not b.vpu_bound:
            assert b == e
            continue
        by_bound += 1
        assert (b.subgraph, b.keep, b.transfer_s, b.cpu_s) == (e.subgraph, e.keep, e.transfer_s, e.cpu_s)
        assert not b.keep and b.vpu_cycles <= e.vpu_cycles
        assert b.to_json()["vpu_cycles_are_a_lower_bound"] is True
        assert "(VPU >= " in b.reason or b.reason == e.reason  # (a subgraph below min_ops: no figures)
    return by_bound


def assert_places_the_same(exact: dict, bounded: dict) -> None:
    """Two partition reports place alike: subgraphs, boundaries, totals, every op's device
    and subgraph, every verdict's decision (not its figures)."""
    for key in ("subgraphs", "boundaries", "totals", "raw_totals"):
        assert bounded[key] == exact[key], key
    assert [(o["name"], o["device"], o["subgraph"]) for o in bounded["ops"]] == [
        (o["name"], o["device"], o["subgraph"]) for o in exact["ops"]
    ]
    decisions = [(v["subgraph"], v["decision"]) for v in exact["profitability"]]
    assert [(v["subgraph"], v["decision"]) for v in bounded["profitability"]] == decisions


def test_random_graphs_place_the_same_with_fewer_layers_planned(monkeypatch):
    """Seeded graphs of test_profit_reprice (branches, model outputs, edge moves, `min_ops`
    1 and 2, some subgraphs with the code generator's cycles): each layer's exact cycles
    seeded, its bound a seeded share of them (0 to all)."""
    target = load_target("vpu")
    rng = random.Random(24)
    planned = {True: 0, False: 0}
    decided_by_bound = 0
    for _ in range(60):
        graph, raw, layer_cycles, estimated = _random_case(rng)
        share = {name: rng.choice((0.0, 0.3, 0.6, 0.9, 1.0)) for name in layer_cycles}
        least = {name: int(cycles * share[name]) for name, cycles in layer_cycles.items()}
        min_ops = rng.choice((1, 1, 2))
        judged = {}
        for exact_figures in (True, False):

            def answer(view, target, exact_figures=exact_figures, layer_cycles=layer_cycles):
                planned[exact_figures] += 1
                return SimpleNamespace(cycles=layer_cycles[view.name])

            monkeypatch.setattr(placement, "answer", answer)
            monkeypatch.setattr(placement, "least", lambda view, target, least=least: least[view.name])
            judged[exact_figures] = profit.judge(graph, raw, target, min_ops, dict(estimated), exact_figures)
        decided_by_bound += _same_decisions(judged[True], judged[False])
    assert decided_by_bound >= 30, decided_by_bound
    assert planned[False] * 10 < planned[True] * 8, planned  # a fifth fewer layers planned or better


def test_a_models_partition_places_the_same_planning_fewer_layers(monkeypatch, partition):
    """opzoonet's shape on vpu, with the real bound (oracle.least) and planner: the same
    ops on each device, subgraphs and boundaries, fewer distinct layers planned."""
    from partition_models import opzoonet_shaped

    import vpuc.compiler.partition as partition_module

    planned = []
    real_plan = oracle._answer
    monkeypatch.setattr(oracle, "_answer", lambda view, target: planned.append(1) or real_plan(view, target))
    reports = {}
    real_judge = partition_module.judge
    for exact_figures in (True, False):
        monkeypatch.setattr(
            partition_module, "judge", lambda *args, e=exact_figures: real_judge(*args[:5], e)
        )
        oracle._ANSWERS.clear()  # every layer planned afresh
        planned.clear()
        reports[exact_figures] = (partition(opzoonet_shaped()), len(planned))
    (exact, exact_planned), (bounded, bounded_planned) = reports[True], reports[False]
    assert_places_the_same(exact, bounded)
    assert any(v.get("vpu_cycles_are_a_lower_bound") for v in bounded["profitability"])
    assert bounded_planned < exact_planned, (bounded_planned, exact_planned)
