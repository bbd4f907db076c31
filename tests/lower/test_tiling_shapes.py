"""Shapes that break naive tilers, each through the whole code generator (residency,
tiling, memory, emission, tokens) and the simulator, bit for bit against the numpy int8
reference of the op list. Small SRAM sizes force the tiling each case is about, and each
test checks that the tiling it names really happened."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vpuc.targets import Numerics

from .conftest import Builder, simulate, with_sram


def _exact(outputs, expected):
    for name, got in outputs.items():
        np.testing.assert_array_equal(got, expected[name], err_msg=name)


def _tiling(program, layer_name):
    return next(layer["tiling"] for layer in program.layers if layer["name"] == layer_name)


@pytest.mark.parametrize("cin,cout", [(3, 17), (17, 33), (33, 3)])
def test_channels_not_multiples_of_the_array(vpu, cin, cout):
    b = Builder(cin)
    y = b.conv(b.input("x", (1, 9, 11, cin)), "conv", cout, relu=True)
    program, _, outputs, expected = simulate(b.subgraph([y]), vpu)
    _exact(outputs, expected)


@pytest.mark.parametrize("k,pads", [((1, 1), (0, 0, 0, 0)), ((7, 7), (3, 3, 3, 3))])
def test_one_by_one_and_seven_by_seven(vpu, k, pads):
    b = Builder(k[0])
    y = b.conv(b.input("x", (1, 14, 14, 8)), "conv", 16, k=k, pads=pads)
    _, _, outputs, expected = simulate(b.subgraph([y]), vpu)
    _exact(outputs, expected)


def test_stride_two_with_odd_sizes_in_row_bands(vpu):
    """15x13 input, stride 2: bands of output rows read overlapping input rows (halos)."""
    b = Builder(2)
    y = b.conv(b.input("x", (1, 15, 13, 16)), "conv", 32, stride=(2, 2))
    program, _, outputs, expected = simulate(b.subgraph([y]), with_sram(vpu, 8 * 1024))
    assert _tiling(program, "conv")["rows_per_tile"] < 8
    _exact(outputs, expected)


def test_asymmetric_padding(vpu):
    b = Builder(3)
    y = b.conv(b.input("x", (1, 10, 9, 8)), "conv", 16, k=(3, 5), pads=(0, 2, 2, 1))
    _, _, outputs, expected = simulate(b.subgraph([y]), with_sram(vpu, 6 * 1024))
    _exact(outputs, expected)


def test_batch_two(vpu):
    b = Builder(4)
    x = b.conv(b.input("x", (2, 8, 8, 16)), "conv1", 16, relu=True)
    y = b.pool(x, "pool", "max", (2, 2), (2, 2))
    z = b.dense(b.conv(y, "conv2", 8), "fc", 4)
    _, _, outputs, expected = simulate(b.subgraph([z]), vpu)
    _exact(outputs, expected)


def test_weights_alone_exceed_sram_so_output_channels_are_tiled(vpu):
    """64 -> 128 channels, 3x3: 73 KiB of weights on a 48 KiB SRAM."""
    b = Builder(5)
    y = b.conv(b.input("x", (1, 6, 6, 64)), "conv", 128)
    small = with_sram(vpu, 48 * 1024)
    program, _, outputs, expected = simulate(b.subgraph([y]), small)
    tiling = _tiling(program, "conv")
    assert tiling["weights"] == "streamed" and tiling["channels_per_tile"] < 128
    _exact(outputs, expected)


def test_input_channels_split_when_one_column_of_weights_does_not_fit(vpu):
    """One 16-column block of a 3x3 conv over 1024 channels is 144 KiB: the input channels
    are split and accumulated (the accumulate flag)."""
    b = Builder(6)
    y = b.conv(b.input("x", (1, 4, 4, 1024)), "conv", 16)
    program, _, outputs, expected = simulate(b.subgraph([y]), with_sram(vpu, 64 * 1024))
    assert _tiling(program, "conv")["input_channel_steps"] > 1
    _exact(outputs, expected)


def test_depthwise_with_a_channel_multiplier(vpu):
    b = Builder(7)
    y = b.conv(b.input("x", (1, 12, 12, 24)), "dw", 48, groups=24)
    program, _, outputs, expected = simulate(b.subgraph([y]), with_sram(vpu, 12 * 1024))
    _exact(outputs, expected)


def test_concat_of_three_inputs(vpu):
    b = Builder(8)
    x = b.input("x", (1, 8, 8, 8))
    parts = [b.conv(x, f"branch{i}", c) for i, c in enumerate((8, 16, 5))]
    q = b.tensors[parts[0]].q  # concat inputs carry the output's quantisation
    for name in parts:
        b.tensors[name] = dataclasses.replace(b.tensors[name], q=q)
    b.ops = [dataclasses.replace(op, out_q=q, requant=dataclasses.replace(op.requant, zero_point=q.zero_point))
             for op in b.ops]  # fmt: skip
    y = b.conv(b.concat(parts, "concat"), "after", 8)
    _, _, outputs, expected = simulate(b.subgraph([y]), vpu)
    _exact(outputs, expected)


def test_pooling_bands_read_their_halo(vpu):
    b = Builder(9)
    x = b.conv(b.input("x", (1, 33, 17, 32)), "conv", 32)
    y = b.pool(x, "pool", "max", (3, 3), (2, 2), (1, 1, 1, 1))
    z = b.pool(y, "avg", "avg", (3, 3), (1, 1), (1, 1, 1, 1))
    program, _, outputs, expected = simulate(b.subgraph([z]), with_sram(vpu, 40 * 1024))
    _exact(outputs, expected)


def test_spilled_tensor_goes_through_dram(vpu):
    """A residual whose skip branch cannot stay in a small SRAM is spilled and reloaded."""
    b = Builder(10)
    x = b.conv(b.input("x", (1, 24, 24, 32)), "stem", 32)
    y = b.conv(b.conv(x, "a", 32), "b", 32)
    z = b.add(x, y, "add")
    program, _, outputs, expected = simulate(b.subgraph([z]), with_sram(vpu, 48 * 1024))
    assert program.estimate["spilled_tensors"]
    _exact(outputs, expected)


def test_fixed_point_requantisation(vpu):
    fixed = dataclasses.replace(vpu, numerics=Numerics(requant="fixed_point"))
    b = Builder(11)
    y = b.dense(b.conv(b.input("x", (1, 6, 6, 16)), "conv", 16), "fc", 10)
    _, _, outputs, expected = simulate(b.subgraph([y]), fixed)
    _exact(outputs, expected)


def test_a_window_the_isa_cannot_hold_is_refused_with_the_layer_named(vpu):
    """Pooling windows are 8-bit fields: a global pool over 300 rows cannot be one
    instruction, and the refusal names the layer (the driver then keeps it on the CPU)."""
    from vpuc.compiler.lower.errors import LowerError

    b = Builder(12)
    y = b.pool(b.input("x", (1, 300, 2, 8)), "gap", "avg", (300, 2), (1, 1))
    with pytest.raises(LowerError, match="layer 'gap'.*window of 300x2"):
        simulate(b.subgraph([y]), vpu)


def test_transfers_beyond_sixteen_bit_row_counts_are_split(vpu):
    """A band of 90000 pixels of 3 channels out of 8 does not fit the DMA's 16-bit row
    count: transfer.band splits it into planes; the simulator gathers exactly the slice."""
    from vpuc.compiler.lower.codegen import transfer
    from vpuc.compiler.lower.codegen.plan import Addr, View
    from vpuc.sim import End, Simulator
    from vpuc.targets.isa.formats import Opcode

    tensor = np.random.default_rng(14).integers(-128, 128, (1, 300, 300, 8)).astype(np.int8)
    view = View("t", 0, tensor.shape, 8)
    specs = transfer.band(Opcode.LOAD, view, 0, (0, 300), (2, 5), Addr("tile"))
    program = [spec.build(lambda a: a.offset) for spec in specs]
    assert len(program) > 1 and all(i.rows * i.planes <= 90000 and i.rows <= 65535 for i in program)
    big = with_sram(vpu, 1 << 20)
    result = Simulator(big).run([*program, End()], tensor.reshape(-1).view(np.uint8))
    got = result.sram[: 300 * 300 * 3].view(np.int8).reshape(1, 300, 300, 3)
    np.testing.assert_array_equal(got, tensor[..., 2:5])
