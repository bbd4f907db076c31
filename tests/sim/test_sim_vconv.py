"""vconv, the depthwise conv on the vector unit (docs/isa.md): bit for bit the reference's
depthwise conv (sim/reference.py `vconv`), on the vector unit's queue beside the MAC array,
its cycles computed by hand, and refused where the target's vector unit has no
multiply-accumulate or the conv is not depthwise."""

from __future__ import annotations

import numpy as np
import pytest

from tests.sim.test_sim_timing_terms import cycles, with_figures
from vpuc.sim import Conv, End, Opcode, SimError, Simulator
from vpuc.sim import reference as ref
from vpuc.targets import load_target

RNG_SEED = 20261202


def int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def vconv(**fields) -> Conv:
    return Conv(opcode=Opcode.VCONV, **fields)


@pytest.mark.parametrize(
    "h,w,channels,stride,pads,zp",
    [
        (6, 6, 32, 1, (1, 1, 1, 1), 5),
        (9, 7, 40, 2, (1, 0, 1, 1), -128),  # more channels than lanes, stride 2, uneven pads
        (5, 5, 3, 1, (0, 0, 0, 0), 127),  # fewer channels than lanes
    ],
)
def test_vconv_matches_the_reference_and_the_mac_arrays_conv(vpu, scratchpad, h, w, channels, stride, pads, zp):
    rng = np.random.default_rng(RNG_SEED)
    x, weights = int8(rng, (h, w, channels)), int8(rng, (channels, 3, 3, 1))
    bias = rng.integers(-(1 << 20), 1 << 20, channels).astype(np.int32)
    expected = ref.vconv(x, weights, zp=zp, stride=(stride, stride), pads=pads, bias=bias)
    src, wts, b = (scratchpad.put(a) for a in (x, weights, bias))
    dst_v, dst_m = scratchpad.reserve(expected.nbytes), scratchpad.reserve(expected.nbytes)
    geometry = dict(src=src, weights=wts, bias=b, in_h=h, in_w=w, in_c=channels, out_c=channels,
                    kernel_h=3, kernel_w=3, stride_h=stride, stride_w=stride, pad_top=pads[0],
                    pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3], groups=channels,
                    src_zp=zp, with_bias=1)  # fmt: skip
    result = scratchpad.run(vpu, [vconv(dst=dst_v, **geometry), Conv(dst=dst_m, **geometry)])
    np.testing.assert_array_equal(scratchpad.read(result, dst_v, expected.shape, np.int32), expected)
    np.testing.assert_array_equal(scratchpad.read(result, dst_m, expected.shape, np.int32), expected)
    # the MAC array's statistics count the conv's MACs alone
    assert result.stats.macs == expected.size * 9


def test_vconv_accumulates(vpu, scratchpad):
    rng = np.random.default_rng(RNG_SEED + 1)
    x, weights = int8(rng, (4, 4, 8)), int8(rng, (8, 1, 1, 1))
    old = rng.integers(-(1 << 31), 1 << 31, (4, 4, 8)).astype(np.int32)
    expected = ref.vconv(x, weights, zp=-1, accumulator=old)
    src, wts, dst = (scratchpad.put(a) for a in (x, weights, old))
    op = vconv(src=src, weights=wts, dst=dst, in_h=4, in_w=4, in_c=8, out_c=8, groups=8, src_zp=-1, accumulate=1)
    result = scratchpad.run(vpu, [op])
    np.testing.assert_array_equal(scratchpad.read(result, dst, (4, 4, 8), np.int32), expected)


# 8x8x40, 3x3, padding 1: 64 output pixels x 9 taps, each two 32-lane vectors of channels
DW = dict(src=0, weights=4096, dst=8192, in_h=8, in_w=8, in_c=40, out_c=40, kernel_h=3, kernel_w=3,
          pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, groups=40)  # fmt: skip


def test_vconv_cycles_by_hand():
    # 2 vectors x 64 pixels x 9 taps = 1152 vectors of 32 lanes at 32 MACs a cycle: 1152
    assert cycles(with_figures(), vconv(**DW)) == 1152
    assert cycles(with_figures(issue_cycles=2), vconv(**DW)) == 1152 + 2
    # at 16 MACs a cycle: 2304
    assert cycles(with_figures(vector_mac_per_cycle=16.0), vconv(**DW)) == 2304
    # scratchpad: input 9 x 64 x 40 = 23040, weights 360, int32 out 64 x 40 x 4 = 10240:
    # 33640 bytes at 16 B/cycle = 2102.5 -> 2103 cycles > 1152
    assert cycles(with_figures(sram_bytes_per_cycle=16), vconv(**DW)) == 2103


def test_vconv_packs_neighbouring_pixels_when_channels_are_few():
    dw16 = {**DW, "in_h": 16, "in_w": 16, "in_c": 16, "out_c": 16, "groups": 16}
    # 16 channels, stride 1: a 32-lane vector holds 2 pixels of a row: 16 rows x 8 vectors x
    # 9 taps = 1152 cycles (one pixel a vector would be 2304)
    assert cycles(with_figures(), vconv(**dw16)) == 1152
    # 3 channels: 10 pixels a vector, ceil(16 / 10) = 2 vectors a row: 16 x 2 x 9 = 288
    dw3 = {**dw16, "in_c": 3, "out_c": 3, "groups": 3}
    assert cycles(with_figures(), vconv(**dw3)) == 288
    # stride 2: the pixels' inputs are not adjacent; 8 x 8 outputs, one vector each, x 9 taps
    assert cycles(with_figures(), vconv(**dw16, stride_h=2, stride_w=2)) == 576


def test_vconv_runs_beside_the_mac_array():
    # a 16-channel depthwise conv on the MAC array: 256 pixels + 16 + 32 = 304 cycles;
    # with no token between them the two units overlap: max(304, 1152), not their sum
    dw = Conv(src=0, weights=4096, dst=16384, in_h=16, in_w=16, in_c=16, out_c=16, groups=16)
    assert cycles(with_figures(), dw) == 304
    result = Simulator(with_figures()).run([dw, vconv(**{**DW, "dst": 32768}), End()])
    assert result.stats.total_cycles == 1152
    assert result.stats.units["VEC"].busy_cycles == 1152
    assert result.stats.units["MAC"].busy_cycles == 304


def test_vconv_is_refused_without_a_vector_mac_or_when_not_depthwise():
    u55 = load_target("u55-256")
    with pytest.raises(SimError, match="no multiply-accumulate"):
        Simulator(u55).run([vconv(**DW), End()])
    with pytest.raises(SimError, match="depthwise only: groups 1, in_c 40, out_c 40"):
        Simulator(with_figures()).run([vconv(**{**DW, "groups": 1}), End()])
