"""The roofline bound (targets/roofline.py) of small layers, by hand, as report.json's
`vpu.layers[].roofline` and a program's `vpu.subgraphs[].roofline` hold it; bench/roofline.py
and the HTML report show those figures."""

from __future__ import annotations

import pytest

from vpuc.compiler.lower.codegen.emit import lower_subgraph
from vpuc.runtime.report_html.tables import layer_rows

from .conftest import Builder


def _layers(vpu):
    """x 8x8x16 -> conv 3x3 (16 -> 16) -> conv 1x1 (16 -> 64) -> depthwise 5x5 -> out."""
    b = Builder(3)
    x = b.input("x", (1, 8, 8, 16))
    y = b.conv(x, "conv", 16)
    y = b.conv(y, "expand", 64, k=(1, 1), pads=(0, 0, 0, 0))
    y = b.conv(y, "dw", 64, k=(5, 5), pads=(2, 2, 2, 2), groups=64)
    program = lower_subgraph(b.subgraph([y]), vpu)
    return program, {layer["name"]: layer["roofline"] for layer in program.layers}


def test_a_conv_bound_by_hand(vpu):
    """conv: 8*8 pixels x 16 outputs x 9 taps x 16 inputs = 147456 MACs / 256 = 576 cycles;
    weights once 2304 B + 16 int32 biases + 16 float32 multipliers = 2432 B and its input
    (1024 B, it crosses DRAM) -> 3456 B / 16 B a cycle = 216 cycles; 1024 outputs at 32 a
    cycle = 32 vector cycles: MAC-bound at 576."""
    _, roofline = _layers(vpu)
    conv = roofline["conv"]
    assert (conv["macs"], conv["compulsory_bytes"]) == (147456, 3456)
    assert conv["vector_cycles"] == pytest.approx(32)
    assert conv["dram_cycles"] == pytest.approx(216)
    assert (conv["bound_cycles"], conv["bound_by"]) == (576, "MAC")


def test_a_depthwise_bound_counts_the_vector_units_macs(vpu):
    """dw: 4096 outputs x 25 taps = 102400 MACs; alone on the array 400 cycles; vpu's vector
    unit multiply-accumulates 32 a cycle besides its 4096 / 32 = 128 requant cycles, so in T
    cycles the two do at most 256 T + 32 (T - 128): T >= (102400 + 4096) / 288 = 369.8.
    Weights 1600 + 256 + 256 B, output 4096 B -> 6208 / 16 = 388 DRAM cycles: DRAM-bound."""
    _, roofline = _layers(vpu)
    dw = roofline["dw"]
    assert (dw["macs"], dw["depthwise_macs"], dw["compulsory_bytes"]) == (102400, 102400, 6208)
    assert dw["mac_cycles"] == pytest.approx(369.8)
    assert (dw["bound_cycles"], dw["bound_by"]) == (388, "DRAM")
    expand = roofline["expand"]  # 64 x 16 x 64 MACs / 256 = 256; no DRAM tensor: 1024 + 256 + 256 B
    assert (expand["mac_cycles"], expand["compulsory_bytes"], expand["bound_by"]) == (256, 1536, "MAC")


def test_the_programs_bound_and_the_report_shows_the_compilers(vpu):
    """The program's: the three layers' MACs, their weights once (2432 + 1536 + 2112 B) and
    its input (1024 B) and output (4096 B): 11200 B / 16 = 700 DRAM cycles, against
    (147456 + 65536 + 102400) / 256 = 1232 MAC cycles alone; with the depthwise MACs on
    either unit (the vector unit's other work: 1024 + 4096 + 4096 outputs / 32 = 288 cycles),
    max(212992 / 256, (315392 + 32 x 288) / 288) = 1127.1. The HTML
    report's layer rows show report.json's figure (bench/roofline.py reads the same keys)."""
    program, roofline = _layers(vpu)
    whole = program.estimate["roofline"]
    assert (whole["macs"], whole["depthwise_macs"], whole["compulsory_bytes"]) == (315392, 102400, 11200)
    assert whole["dram_cycles"] == pytest.approx(700)
    assert whole["bound_cycles"] == pytest.approx(1127.1) and whole["bound_by"] == "MAC"
    report = {"vpu": {"layers": [{"subgraph": 0, **layer} for layer in program.layers]}}
    shown = {row["name"]: row["bound_cycles"] for row in layer_rows(report, None, {})}
    assert shown == {name: figures["bound_cycles"] for name, figures in roofline.items()}
