"""A layer's one-off constant load runs during an earlier layer (codegen/prefetch.py): on
the anchor tinyconv at u55-256 (weights in flash: 1 B/cycle, 64 cycles latency, 128-byte
bursts, 8 cycles to issue), the FC's 176 bytes of weights load while an earlier layer runs
(the estimate picks the last conv, after its last load, where it follows that conv's own
weight stream on the flash port), done before the FC starts, not after the mean's store.
Without prefetches (prefetch.disabled(), as bench/vs_vela.py's like-for-like figures lower)
the same load is the FC's own, alone on the port (248 cycles by hand), and the FC's span
holds it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower.codegen import prefetch
from vpuc.sim import Simulator
from vpuc.targets.isa.formats import Dma

ANCHOR = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "tinyconv" / "tinyconv_int8_qdq.onnx"
# by hand, from targets/u55-256.toml: issue 8 + latency 64 + 176 B at 1 B/cycle (a burst of
# 128 B and one of 48)
FC_WEIGHTS_CYCLES = 8 + 64 + 176


def _run():
    prepared = prepare_model(ANCHOR, "u55-256", CompileOptions(calib_synthetic=4))
    (program,) = prepared.programs
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    result = Simulator(prepared.target).run(program.program, image)
    by_kind = {layer["op"]: layer["id"] for layer in program.layers}
    fc_blob = next(r for r in program.dram_map if r["name"] == f"blob{by_kind['dense'] - 1}.weights")
    assert fc_blob["bytes"] == 176
    (pc,) = [pc for pc, i in enumerate(program.program.instructions) if isinstance(i, Dma)
             and i.region and i.dram == fc_blob["address"]]  # fmt: skip
    spans = {layer.layer: (layer.start_cycle, layer.end_cycle) for layer in result.stats.layers}
    timeline = result.timeline
    load = (program.program.instructions[pc].layer, timeline.start[pc], timeline.end[pc])
    return result.stats.total_cycles, load, spans, by_kind


@pytest.mark.skipif(not ANCHOR.is_file(), reason="the anchors (../shared/anchors) are not on this machine")
def test_the_fc_weights_load_during_an_earlier_layer():
    with prefetch.disabled():
        late_total, (late_layer, late_start, late_end), late_spans, kinds = _run()
    assert prefetch.PREFETCH_ROLES == {"w", "table"}  # restored
    mean, fc = kinds["pool"], kinds["dense"]  # the last pool layer is tinyconv's mean
    assert late_layer == fc and late_end - late_start == FC_WEIGHTS_CYCLES
    assert late_spans[fc][1] - late_spans[fc][0] >= FC_WEIGHTS_CYCLES  # the FC's span holds it
    total, (layer, start, end), spans, _ = _run()
    assert layer < mean and end - start >= FC_WEIGHTS_CYCLES  # it may queue on the flash port
    assert end <= spans[fc][0]  # done before the FC starts: hidden
    assert spans[fc][1] - spans[fc][0] < FC_WEIGHTS_CYCLES
    assert late_total - total >= 2 * 128  # at least its flash data time is off the total


@pytest.mark.skipif(not ANCHOR.is_file(), reason="the anchors (../shared/anchors) are not on this machine")
@pytest.mark.parametrize("roles, moved", [({"w"}, False), ({"table"}, True)])
def test_disabling_a_role_keeps_only_its_loads_in_place(roles, moved):
    """bench/vs_vela.py's like-for-like run disables the weights' role alone: the FC's
    weights (role "w") then load at the FC; disabling tables leaves them moved."""
    with prefetch.disabled(frozenset(roles)):
        _, (layer, _, _), _, kinds = _run()
    assert (layer < kinds["dense"]) == moved
