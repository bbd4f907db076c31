"""bench/vs_vela.py's like-for-like (`own`) figures lower every conv as a conv: the anchor
tinyconv's first layer (16x16x3 -> 16x16x16, 3x3, as U55 runs it: Vela's figure for it is
one Conv2D of 110592 MACs) is then one 3x3 conv over 3 input channels, not the first-layer
im2col the emitted program (`schedule`) may take; the switch is put back after."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower import lower_partitioned
from vpuc.compiler.lower.codegen import tile_im2col
from vpuc.targets.isa.cost import instruction_macs
from vpuc.targets.isa.formats import Conv, Opcode

BENCH = Path(__file__).resolve().parents[2] / "bench"
ANCHOR = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "tinyconv" / "tinyconv_int8_qdq.onnx"


def _first_layer_convs(programs) -> list[Conv]:
    (program,) = programs
    instructions = program.program.instructions
    first = min(i.layer for i in instructions if i.opcode == Opcode.CONV)
    return [i for i in instructions if i.opcode == Opcode.CONV and i.layer == first]


@pytest.mark.skipif(not ANCHOR.is_file(), reason="the anchors (../shared/anchors) are not on this machine")
def test_own_figures_lower_the_first_conv_as_a_conv(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import vs_vela

    prepared = prepare_model(ANCHOR, "u55-256-sram", CompileOptions(calib_synthetic=4))
    emitted = _first_layer_convs(prepared.programs)
    assert any((c.in_c, c.kernel_h, c.kernel_w) != (3, 3, 3) for c in emitted)  # an im2col
    with vs_vela.convs_as_convs():
        own = lower_partitioned(prepared.partition.mod, prepared.target, prepared.provenance)
    assert tile_im2col.CHOOSE == "estimate"
    convs = _first_layer_convs(own)
    assert convs and all((c.in_c, c.kernel_h, c.kernel_w) == (3, 3, 3) for c in convs)
    # every output pixel's 27 MACs for 16 channels, once: 256 * 16 * 27 = 110592 (Vela's macs)
    assert sum(instruction_macs(c) for c in convs) == 16 * 16 * 16 * 27 == 110592
    sys.modules.pop("vs_vela", None)
