"""Every operation through the simulator against sim/reference.py, bit for bit, on random data
with saturation, negative zero points, rounding ties and odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.sim import (
    Add,
    AvgPool,
    Clip,
    Conv,
    Dma,
    End,
    Lut,
    Matmul,
    MaxPool,
    Opcode,
    Requant,
    Simulator,
)
from vpuc.sim import reference as ref
from vpuc.targets.isa.params import quantize_multiplier

RNG_SEED = 20240611


def int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


CONV_CASES = [
    # (h, w, in_c, out_c, k, stride, dilation, pads, groups, zp)
    (8, 8, 16, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, -3),
    (7, 5, 3, 8, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, 17),  # odd shape, Cin=3
    (9, 11, 8, 12, (5, 3), (2, 1), (1, 2), (2, 1, 0, 3), 1, -128),  # asymmetric everything
    (6, 6, 32, 32, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 32, 5),  # depthwise
    (6, 6, 8, 16, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 8, -7),  # depthwise, multiplier 2
    (5, 5, 12, 6, (3, 3), (1, 2), (1, 1), (0, 1, 1, 0), 3, 127),  # grouped
    (4, 4, 40, 40, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, 0),  # pointwise
    (3, 3, 200, 10, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1, -9),  # K = 1800: float64 path
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("with_bias", [0, 1])
def test_conv_matches_reference(vpu, scratchpad, case, with_bias):
    h, w, in_c, out_c, kernel, stride, dilation, pads, groups, zp = case
    rng = np.random.default_rng(RNG_SEED)
    x, weights = int8(rng, (h, w, in_c)), int8(rng, (out_c, *kernel, in_c // groups))
    bias = rng.integers(-(1 << 20), 1 << 20, out_c).astype(np.int32)
    expected = ref.conv2d(
        x,
        weights,
        zp=zp,
        stride=stride,
        dilation=dilation,
        pads=pads,
        groups=groups,
        bias=bias if with_bias else None,
    )
    addresses = [scratchpad.put(a) for a in (x, weights, bias)]
    dst = scratchpad.reserve(expected.nbytes)
    conv = Conv(
        src=addresses[0],
        weights=addresses[1],
        bias=addresses[2],
        dst=dst,
        in_h=h,
        in_w=w,
        in_c=in_c,
        out_c=out_c,
        kernel_h=kernel[0],
        kernel_w=kernel[1],
        stride_h=stride[0],
        stride_w=stride[1],
        dilation_h=dilation[0],
        dilation_w=dilation[1],
        pad_top=pads[0],
        pad_bottom=pads[1],
        pad_left=pads[2],
        pad_right=pads[3],
        groups=groups,
        src_zp=zp,
        with_bias=with_bias,
    )
    result = scratchpad.run(vpu, [conv])
    np.testing.assert_array_equal(scratchpad.read(result, dst, expected.shape, np.int32), expected)
    assert result.stats.macs == expected.size * kernel[0] * kernel[1] * (in_c // groups)


def test_conv_accumulates_and_wraps_like_int32(vpu, scratchpad):
    rng = np.random.default_rng(RNG_SEED)
    x, weights = int8(rng, (4, 4, 8)), int8(rng, (8, 1, 1, 8))
    bias = np.full(8, (1 << 31) - 1000, dtype=np.int32)  # overflows: wraps to negative
    old = rng.integers(-(1 << 31), 1 << 31, (4, 4, 8)).astype(np.int32)
    expected = ref.conv2d(x, weights, zp=-1, bias=bias, accumulator=old)
    src, wts, b, dst = (scratchpad.put(a) for a in (x, weights, bias, old))
    conv = Conv(
        src=src,
        weights=wts,
        bias=b,
        dst=dst,
        in_h=4,
        in_w=4,
        in_c=8,
        out_c=8,
        src_zp=-1,
        with_bias=1,
        accumulate=1,
    )
    result = scratchpad.run(vpu, [conv])
    np.testing.assert_array_equal(scratchpad.read(result, dst, old.shape, np.int32), expected)


def test_conv_with_a_reduction_beyond_float64_range_uses_int64(vpu_plus, scratchpad):
    in_c = 16384  # K = 9 * 16384 > 131071
    rng = np.random.default_rng(RNG_SEED)
    x = np.full((3, 3, in_c), -128, dtype=np.int8)
    x[0, 0, :7] = int8(rng, 7)
    weights = np.full((1, 3, 3, in_c), -128, dtype=np.int8)
    expected = ref.conv2d(x, weights, zp=127, bias=None)
    src, wts = scratchpad.put(x), scratchpad.put(weights)
    dst = scratchpad.reserve(4)
    conv = Conv(
        src=src, weights=wts, dst=dst, in_h=3, in_w=3, in_c=in_c, out_c=1, kernel_h=3, kernel_w=3, src_zp=127
    )
    result = scratchpad.run(vpu_plus, [conv])
    np.testing.assert_array_equal(scratchpad.read(result, dst, (1, 1, 1), np.int32), expected)


@pytest.mark.parametrize(("m", "k", "n", "zp"), [(1, 512, 1000, -5), (7, 3, 5, 127), (33, 1500, 17, 0)])
def test_matmul_matches_reference(vpu, scratchpad, m, k, n, zp):
    rng = np.random.default_rng(RNG_SEED)
    x, weights = int8(rng, (m, k)), int8(rng, (n, k))
    bias = rng.integers(-(1 << 24), 1 << 24, n).astype(np.int32)
    old = rng.integers(-(1 << 24), 1 << 24, (m, n)).astype(np.int32)
    expected = ref.matmul(x, weights, zp=zp, bias=bias, accumulator=old)
    src, wts, b, dst = (scratchpad.put(a) for a in (x, weights, bias, old))
    mm = Matmul(src=src, weights=wts, bias=b, dst=dst, m=m, k=k, n=n, src_zp=zp, with_bias=1, accumulate=1)
    result = scratchpad.run(vpu, [mm])
    np.testing.assert_array_equal(scratchpad.read(result, dst, (m, n), np.int32), expected)


def _requant(target, scratchpad, acc, params, per_channel=1, zp=0, lo=-128, hi=127):
    src, p = scratchpad.put(acc), scratchpad.put(params)
    dst = scratchpad.reserve(acc.size)
    rq = Requant(
        src=src,
        dst=dst,
        params=p,
        pixels=acc.shape[0],
        channels=acc.shape[1],
        per_channel=per_channel,
        dst_zp=zp,
        clamp_min=lo,
        clamp_max=hi,
    )
    return scratchpad.read(scratchpad.run(target, [rq]), dst, acc.shape, np.int8)


@pytest.mark.parametrize(("zp", "lo", "hi"), [(0, -128, 127), (-7, -7, 127), (-128, -128, -80)])
def test_requant_float32_matches_reference(vpu, scratchpad, zp, lo, hi):
    rng = np.random.default_rng(RNG_SEED)
    acc = np.concatenate(
        [
            rng.integers(-(1 << 31), 1 << 31, (40, 24)),  # saturates
            rng.integers(-20000, 20000, (40, 24)),
        ]
    ).astype(np.int32)
    multiplier = np.exp(rng.uniform(-14, 0, 24)).astype(np.float32)
    expected = ref.requant_float32(acc, multiplier, zp, lo, hi)
    np.testing.assert_array_equal(_requant(vpu, scratchpad, acc, multiplier, 1, zp, lo, hi), expected)


def test_requant_rounds_ties_to_even(vpu, scratchpad):
    acc = np.array([[1, 3, 5, 7, -1, -3, -5, 255, 257, -255]], dtype=np.int32)
    got = _requant(vpu, scratchpad, acc, np.array([0.5], np.float32), per_channel=0)
    np.testing.assert_array_equal(got[0], [0, 2, 2, 4, 0, -2, -2, 127, 127, -128])
    np.testing.assert_array_equal(got, ref.requant_float32(acc, np.float32(0.5)))


def test_requant_fixed_point_matches_reference(vpu_fixed_point, scratchpad):
    rng = np.random.default_rng(RNG_SEED)
    acc = np.concatenate(
        [
            rng.integers(-(1 << 31), 1 << 31, (6, 16)),
            rng.integers(-5000, 5000, (6, 16)),
            np.full((1, 16), -(1 << 31)),
        ]
    ).astype(np.int32)
    pairs = [quantize_multiplier(float(r)) for r in np.exp(rng.uniform(-12, 2, 16))]
    pairs[0] = (-(1 << 31), 0)  # SRDHM's one saturating case, with acc = INT32_MIN
    pairs[1] = ((1 << 30) + 1, -31)
    multiplier = np.array([m for m, _ in pairs], dtype=np.int32)
    shift = np.array([s for _, s in pairs], dtype=np.int32)
    got = _requant(vpu_fixed_point, scratchpad, acc, np.concatenate([multiplier, shift]), zp=-3)
    np.testing.assert_array_equal(got, ref.requant_fixed_point(acc, multiplier, shift, zp=-3))


def test_requant_fixed_point_rounds_ties_away_from_zero(vpu_fixed_point, scratchpad):
    acc = np.array([[-10, -6, -2, 2, 6, 10]], dtype=np.int32)  # x 0.25: halves everywhere
    params = np.array([1 << 30, -1], dtype=np.int32)  # 0.5 in Q31, then one right shift
    got = _requant(vpu_fixed_point, scratchpad, acc, params, per_channel=0)
    np.testing.assert_array_equal(got[0], [-3, -2, -1, 1, 2, 3])
    np.testing.assert_array_equal(got, ref.requant_fixed_point(acc, 1 << 30, -1))


def test_quantize_multiplier_represents_the_scale():
    for real in (0.5, 0.0123, 1.75, 3e-6):
        multiplier, shift = quantize_multiplier(real)
        assert 1 << 30 <= multiplier < 1 << 31
        assert abs(multiplier * 2.0 ** (shift - 31) - real) <= real * 2**-30


@pytest.mark.parametrize("count", [1, 31, 32, 1000])
def test_add_matches_reference(vpu, scratchpad, count):
    rng = np.random.default_rng(count)
    a, b = int8(rng, count), int8(rng, count)
    scale_a, scale_b = np.float32(rng.uniform(0.1, 3)), np.float32(rng.uniform(0.1, 3))
    expected = ref.add(a, b, zp_a=-128, zp_b=5, scale_a=scale_a, scale_b=scale_b, zp=-1, lo=-50, hi=120)
    pa, pb = scratchpad.put(a), scratchpad.put(b)
    add = Add(
        src_a=pa,
        src_b=pb,
        dst=pa,
        count=count,
        zp_a=-128,
        zp_b=5,
        dst_zp=-1,
        clamp_min=-50,
        clamp_max=120,
        scale_a=scale_a,
        scale_b=scale_b,
    )
    got = scratchpad.read(scratchpad.run(vpu, [add]), pa, (count,), np.int8)  # in place
    np.testing.assert_array_equal(got, expected)


def test_add_rounds_ties_to_even(vpu, scratchpad):
    a = np.array([1, 3, 5, -1, -3], dtype=np.int8)
    b = np.zeros(5, dtype=np.int8)
    pa, pb, dst = scratchpad.put(a), scratchpad.put(b), scratchpad.reserve(5)
    add = Add(src_a=pa, src_b=pb, dst=dst, count=5, scale_a=0.5, scale_b=1.0)
    got = scratchpad.read(scratchpad.run(vpu, [add]), dst, (5,), np.int8)
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2])


def test_clip_and_lut_match_reference(vpu_plus, scratchpad):
    rng = np.random.default_rng(RNG_SEED)
    x, table = int8(rng, 777), int8(rng, 256)
    px, pt, dst = scratchpad.put(x), scratchpad.put(table), scratchpad.reserve(777)
    program = [
        Clip(src=px, dst=dst, count=777, clamp_min=-5, clamp_max=90),
        Lut(src=dst, dst=dst, table=pt, count=777),
    ]
    got = scratchpad.read(scratchpad.run(vpu_plus, program), dst, (777,), np.int8)
    np.testing.assert_array_equal(got, ref.lut(ref.clip(x, -5, 90), table))


POOL_CASES = [
    # (h, w, c, kernel, stride, pads)
    (8, 8, 16, (2, 2), (2, 2), (0, 0, 0, 0)),
    (9, 7, 33, (3, 3), (2, 2), (1, 1, 1, 1)),
    (5, 6, 8, (3, 2), (1, 2), (2, 0, 1, 1)),
    (7, 7, 40, (7, 7), (1, 1), (0, 0, 0, 0)),  # global average
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_maxpool_matches_reference(vpu, scratchpad, case):
    h, w, c, kernel, stride, pads = case
    x = int8(np.random.default_rng(RNG_SEED), (h, w, c))
    expected = ref.maxpool(x, kernel, stride, pads)
    src, dst = scratchpad.put(x), scratchpad.reserve(expected.size)
    pool = MaxPool(
        src=src,
        dst=dst,
        in_h=h,
        in_w=w,
        channels=c,
        kernel_h=kernel[0],
        kernel_w=kernel[1],
        stride_h=stride[0],
        stride_w=stride[1],
        pad_top=pads[0],
        pad_bottom=pads[1],
        pad_left=pads[2],
        pad_right=pads[3],
    )
    got = scratchpad.read(scratchpad.run(vpu, [pool]), dst, expected.shape, np.int8)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_avgpool_matches_reference(vpu, scratchpad, case, count_include_pad):
    h, w, c, kernel, stride, pads = case
    x = int8(np.random.default_rng(RNG_SEED), (h, w, c))
    args = dict(zp=-20, scale=np.float32(0.7), dst_zp=3, lo=-100, hi=127)
    expected = ref.avgpool(x, kernel, stride, pads, count_include_pad=bool(count_include_pad), **args)
    src, dst = scratchpad.put(x), scratchpad.reserve(expected.size)
    pool = AvgPool(
        src=src,
        dst=dst,
        in_h=h,
        in_w=w,
        channels=c,
        kernel_h=kernel[0],
        kernel_w=kernel[1],
        stride_h=stride[0],
        stride_w=stride[1],
        pad_top=pads[0],
        pad_bottom=pads[1],
        pad_left=pads[2],
        pad_right=pads[3],
        src_zp=-20,
        dst_zp=3,
        scale=0.7,
        clamp_min=-100,
        clamp_max=127,
        count_include_pad=count_include_pad,
    )
    got = scratchpad.read(scratchpad.run(vpu, [pool]), dst, expected.shape, np.int8)
    np.testing.assert_array_equal(got, expected)


DMA_CASES = [
    # (shape planes x rows x row_bytes, dram (row, plane) strides, sram (row, plane) strides)
    ((1, 1, 1000), (0, 0), (0, 0)),
    ((1, 5, 24), (100, 0), (24, 0)),  # 2-D gather of a column block
    ((3, 4, 8), (16, 200), (8, 32)),  # 3-D
    ((2, 3, 8), (0, 8), (8, 24)),  # source stride 0: broadcast rows
]


@pytest.mark.parametrize(("shape", "dram_strides", "sram_strides"), DMA_CASES)
def test_dma_load_and_store_match_reference(vpu, shape, dram_strides, sram_strides):
    rng = np.random.default_rng(RNG_SEED)
    image = rng.integers(0, 256, 4096).astype(np.uint8)
    common = dict(row_bytes=shape[2], rows=shape[1], planes=shape[0])
    load = Dma(
        opcode=Opcode.LOAD,
        dram=64,
        sram=128,
        dram_row_stride=dram_strides[0],
        dram_plane_stride=dram_strides[1],
        sram_row_stride=sram_strides[0],
        sram_plane_stride=sram_strides[1],
        signal=1,
        **common,
    )
    store = Dma(
        opcode=Opcode.STORE,
        dram=2048,
        sram=128,
        sram_row_stride=sram_strides[0],
        sram_plane_stride=sram_strides[1],
        dram_row_stride=sram_strides[0],
        dram_plane_stride=sram_strides[1],
        **common,
    )
    result = Simulator(vpu).run([load, store, End()], image)
    sram = np.zeros(vpu.hardware.sram_bytes, np.uint8)
    ref.dma_copy(image, 64, sram, 128, shape, dram_strides, sram_strides)
    np.testing.assert_array_equal(result.sram, sram)
    dram = image.copy()
    dram.resize(result.dram.size)
    ref.dma_copy(sram, 128, dram, 2048, shape, sram_strides, sram_strides)
    np.testing.assert_array_equal(result.dram, dram)
    assert result.stats.dram_read_bytes == result.stats.dram_written_bytes == np.prod(shape)
