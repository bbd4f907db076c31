"""The prefetch chooser (codegen/prefetch.py `choose`) stops a trial as soon as its clock,
past the layer whose loads it moves, is nowhere sooner than the kept schedule's there: the
estimate is made of maxima and sums of what the clock holds, so the trial can end no
sooner than the kept schedule (`best` or later) and cannot be chosen. The programs must be
those of the chooser that runs every trial to the end, with fewer layers estimated; a stop
that fired where the trial could still win would drop a prefetch and change them."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower import memo
from vpuc.compiler.lower.codegen import prefetch, tiling

ANCHORS = Path(__file__).resolve().parents[3] / "shared" / "anchors"
ANCHOR = ANCHORS / "resnet8" / "resnet8_int8_qdq.onnx"


def _lowered(target_name: str):
    """Its one program, lowered afresh (not the lowering memo's), and how many layers'
    events were estimated."""
    estimated = []
    real = tiling.Events.estimate

    def counting(self, *args, **kwargs):
        estimated.append(1)
        return real(self, *args, **kwargs)

    with mock.patch.object(tiling.Events, "estimate", counting), mock.patch.object(memo, "_LOWERED", {}):
        (program,) = prepare_model(ANCHOR, target_name, CompileOptions()).programs
    return program, len(estimated)


@pytest.mark.skipif(not ANCHOR.is_file(), reason="the anchors (../shared/anchors) are not on this machine")
@pytest.mark.parametrize("target_name", ["u55-256", "vpu-plus"])
def test_stopped_trials_choose_as_trials_run_to_the_end(target_name):
    """The anchor resnet8, whose weight loads move into earlier layers on both targets
    (test_prefetch_pieces.py): the same program, blob and estimate, fewer layers estimated."""
    program, estimated = _lowered(target_name)
    with mock.patch.object(prefetch, "_no_sooner", lambda *args: False):
        whole, estimated_whole = _lowered(target_name)
    assert program.program.instructions == whole.program.instructions
    assert program.blob == whole.blob and program.estimate == whole.estimate
    assert estimated < estimated_whole, (estimated, estimated_whole)


def test_a_clock_sooner_in_anything_the_layers_after_read_is_not_no_sooner():
    """_no_sooner compares every figure the estimate reads from the clock: a trial sooner in
    any one of them might still end sooner, so it must run on."""
    import dataclasses

    from vpuc.compiler.lower.codegen.estimate import Clock
    from vpuc.targets import load_target
    from vpuc.targets.isa.dma_cost import DmaPorts
    from vpuc.targets.isa.formats import Unit

    hw = dataclasses.replace(load_target("u55-256").hardware, dram_outstanding=2)
    ports = DmaPorts(hw)
    ports.taken, ports.port_free, ports.ends = 10, {"dram": 12, "flash": 40}, {"dram": [8, 12], "flash": [40]}
    kept = Clock({Unit.DMA: 10, Unit.MAC: 20, Unit.VEC: 5}, {"x": 30, "w": 25}, ports, 40)
    waited = frozenset({"x"})
    assert prefetch._no_sooner(kept.copy(), kept, waited)
    later = kept.copy()
    later.ready["w"] = 0  # a weight buffer the layers after do not wait on
    assert prefetch._no_sooner(later, kept, waited)

    def sooner(change) -> bool:
        trial = kept.copy()
        change(trial)
        return not prefetch._no_sooner(trial, kept, waited)

    assert sooner(lambda c: c.free.__setitem__(Unit.MAC, 19))
    assert sooner(lambda c: c.ready.__setitem__("x", 29))
    assert sooner(lambda c: setattr(c, "dma_retired", 39))
    assert sooner(lambda c: setattr(c.ports, "taken", 9))
    assert sooner(lambda c: c.ports.port_free.__setitem__("flash", 39))
    assert sooner(lambda c: c.ports.ends.__setitem__("dram", [7, 12]))  # its second-last in flight
    assert sooner(lambda c: c.ports.ends.__setitem__("dram", [12]))  # fewer in flight
    assert sooner(lambda c: setattr(c, "ports", None))
