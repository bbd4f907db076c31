"""A conv whose output channels fill at most half the vector unit's lanes is requantised with
several neighbouring pixels a vector (mac_shape.lane_pack): bit for bit the numpy int8
reference (float32 and fixed-point parameters, an output in DRAM and one resident in SRAM,
a width that only 3 pixels a vector divide), and the requantisation's cycles by hand from
targets/vpu.toml."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.targets import load_target
from vpuc.targets.isa.formats import Opcode

from .conftest import Builder, simulate


def _requants(program, layer: int):
    return [
        (pc, i)
        for pc, i in enumerate(program.program.instructions)
        if i.opcode == Opcode.REQUANT and i.layer == layer
    ]


def _exact(outputs, expected):
    for name, got in outputs.items():
        np.testing.assert_array_equal(got, expected[name], err_msg=name)


@pytest.mark.parametrize(
    "target_name,cin,cout,width,per_vector",
    [
        ("vpu", 8, 16, 16, 2),  # 32 lanes: 2 pixels of 16 channels
        ("vpu", 8, 8, 9, 3),  # up to 4 pixels of 8, but 9 columns: 3
        ("u55-256", 8, 8, 10, 2),  # 16 lanes, fixed-point parameters (ints, then shifts)
    ],
)
def test_pixels_packed_into_the_lanes_are_exact(target_name, cin, cout, width, per_vector):
    """Two convs: the first's output stays in SRAM for the second, the second's goes to DRAM;
    every requantisation of either holds `per_vector` pixels of all its channels."""
    target = load_target(target_name)
    b = Builder(cout + width)
    x = b.conv(b.input("x", (1, 6, width, cin)), "conv1", cout, relu=True)
    y = b.conv(x, "conv2", cout)
    program, _, outputs, expected = simulate(b.subgraph([y]), target)
    for layer in (1, 2):
        found = _requants(program, layer)
        assert found and all(i.channels == per_vector * cout for _, i in found), found
    _exact(outputs, expected)


def test_requantisation_cycles_by_hand():
    """tinyconvnet's stage2 shape (16x16x8 -> 16 channels, 3x3) on `vpu`. By hand from
    targets/vpu.toml: a requantisation costs issue_cycles (2) + the larger of its vectors'
    time, vectors x vector_lanes / vector_requant_per_cycle (32 / 32: a cycle each), and its
    scratchpad time, 5 bytes an element (the int32 read, the int8 write) /
    sram_bytes_per_cycle (128). A band of R rows is E = R x 16 x 16 elements. As one pixel of
    16 channels a vector (the old plan): E / 16 vectors, 2 + max(E / 16, 5E / 128) = 130 for
    R = 8. Two pixels a vector: E / 32 vectors, 2 + max(E / 32, 5E / 128) = 2 + 5E / 128 = 82
    for R = 8: the scratchpad is now what bounds it."""
    target = load_target("vpu")
    b = Builder(7)
    y = b.conv(b.input("x", (1, 16, 16, 8)), "conv", 16, relu=True)
    program, result, outputs, expected = simulate(b.subgraph([y]), target)
    found = _requants(program, 1)
    assert found
    for pc, i in found:
        elements = i.pixels * i.channels
        by_hand = 2 + max(elements // 32, -(-5 * elements // 128))
        assert result.timeline.end[pc] - result.timeline.start[pc] == by_hand
        assert by_hand < 2 + elements // 16  # fewer cycles than one pixel a vector
    _exact(outputs, expected)
