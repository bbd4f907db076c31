"""The fields the code generator needs beyond a whole-tensor op, against sim/reference.py:
mul (with a broadcast row), a conv reading a channel range of a wider tensor (src_stride),
a requant writing a channel range into one (dst_stride), a matmul of two activations (k x n
weights with a zero point)."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.sim import Conv, Matmul, Mul, Requant
from vpuc.sim import reference as ref

RNG = np.random.default_rng(7)


def int8(shape):
    return RNG.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize("broadcast", [False, True])
def test_mul_matches_reference(vpu, scratchpad, broadcast):
    a = int8((6, 20))
    b = int8((1, 20) if broadcast else (6, 20))
    expected = ref.mul(a, b, zp_a=-3, zp_b=5, scale=0.0123, zp=-7, lo=-100, hi=120)
    addresses = [scratchpad.put(x) for x in (a, b)]
    dst = scratchpad.reserve(a.size)
    instruction = Mul(src_a=addresses[0], src_b=addresses[1], dst=dst, pixels=6, channels=20,
                      broadcast_b=int(broadcast), zp_a=-3, zp_b=5, scale=0.0123, dst_zp=-7,
                      clamp_min=-100, clamp_max=120)  # fmt: skip
    result = scratchpad.run(vpu, [instruction])
    np.testing.assert_array_equal(scratchpad.read(result, dst, a.shape, np.int8), expected)


def test_conv_reads_a_channel_range_of_a_wider_tensor(vpu, scratchpad):
    wide = int8((5, 6, 24))  # channels 8..20 are the conv's input
    weights = int8((16, 3, 3, 12))
    expected = ref.conv2d(wide[:, :, 8:20], weights, zp=4, pads=(1, 1, 1, 1))
    src, w = scratchpad.put(wide), scratchpad.put(weights)
    dst = scratchpad.reserve(expected.nbytes)
    conv = Conv(src=src + 8, weights=w, dst=dst, in_h=5, in_w=6, in_c=12, out_c=16, kernel_h=3, kernel_w=3,
                pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, src_zp=4, src_stride=24)  # fmt: skip
    result = scratchpad.run(vpu, [conv])
    np.testing.assert_array_equal(scratchpad.read(result, dst, expected.shape, np.int32), expected)


def test_requant_writes_a_channel_range_of_a_wider_tensor(vpu, scratchpad):
    acc = RNG.integers(-50000, 50000, (10, 8)).astype(np.int32)
    multipliers = np.full(8, 0.003, np.float32)
    before = int8((10, 24))
    src, params, dst = scratchpad.put(acc), scratchpad.put(multipliers), scratchpad.put(before)
    instruction = Requant(
        src=src, dst=dst + 16, params=params, pixels=10, channels=8, dst_zp=2, dst_stride=24
    )
    result = scratchpad.run(vpu, [instruction])
    expected = before.copy()
    expected[:, 16:24] = ref.requant_float32(acc, multipliers, 2)
    np.testing.assert_array_equal(scratchpad.read(result, dst, before.shape, np.int8), expected)


def test_matmul_of_two_activations(vpu, scratchpad):
    a, b = int8((7, 33)), int8((33, 19))  # b as stored: k x n
    expected = ref.matmul(a, b.T, zp=-5, w_zp=9)
    src, w = scratchpad.put(a), scratchpad.put(b)
    dst = scratchpad.reserve(expected.nbytes)
    instruction = Matmul(src=src, weights=w, dst=dst, m=7, k=33, n=19, src_zp=-5, weights_kn=1, weights_zp=9)
    result = scratchpad.run(vpu, [instruction])
    np.testing.assert_array_equal(scratchpad.read(result, dst, expected.shape, np.int32), expected)
