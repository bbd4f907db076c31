"""The SOFTMAX instruction with the compiler's parameters (exp table, output multiplier)
over many random rows, ties and extreme logits, against three references from outside
the code under test:

- TFLite's int8 reference kernel (tensorflow/lite/kernels/internal/reference/softmax.h with
  gemmlowp's fixed-point exp and reciprocal), ported below in Python integers: within 1 LSB;
- the exact softmax of the dequantised logits, in float64, quantised to scale 1/256 and
  zero point -128 (TFLite's and onnxruntime's quantiser's output): within 1 LSB;
- sim/reference.py's row-by-row definition: bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vpuc.compiler.lower.reader.softmax import error_bound_lsb, exp_table, output_multiplier
from vpuc.sim import SimError, Softmax
from vpuc.sim import reference as ref

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
OUT_SCALE, OUT_ZP = 1.0 / 256.0, -128

# --- TFLite's int8 reference softmax (gemmlowp fixed point), in Python integers --------------


def _srdhm(a: int, b: int) -> int:
    """SaturatingRoundingDoublingHighMul (ARM VQRDMULH): C's truncating division."""
    if a == b == INT32_MIN:
        return INT32_MAX
    product = a * b
    nudged = product + ((1 << 30) if product >= 0 else 1 - (1 << 30))
    quotient = abs(nudged) >> 31
    return quotient if nudged >= 0 else -quotient


def _rdbpot(x: int, exponent: int) -> int:
    """RoundingDivideByPOT: round half away from zero."""
    mask = (1 << exponent) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if (x & mask) > threshold else 0)


def _saturating_shift_left(x: int, exponent: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, x << exponent))


def _exp_quarter(a: int) -> int:
    """exp on [-1/4, 0), Q0 in and out."""
    constant_term, one_third = 1895147668, 715827883
    x = a + (1 << 28)
    x2 = _srdhm(x, x)
    x3 = _srdhm(x2, x)
    x4 = _srdhm(x2, x2)
    poly = _rdbpot(_srdhm(_rdbpot(x4, 2) + x3, one_third) + x2, 1)
    return constant_term + _srdhm(constant_term, x + poly)


BARREL = (
    (-2, 1672461947),
    (-1, 1302514674),
    (0, 790015084),
    (1, 290630308),
    (2, 39332535),
    (3, 720401),
    (4, 242),
)


def _exp_on_negative_values(a: int, integer_bits: int = 5) -> int:
    fractional = 31 - integer_bits
    quarter = 1 << (fractional - 2)
    a_mod_quarter_minus_quarter = (a & (quarter - 1)) - quarter
    result = _exp_quarter(_saturating_shift_left(a_mod_quarter_minus_quarter, integer_bits))
    remainder = a_mod_quarter_minus_quarter - a
    for exponent, multiplier in BARREL:
        if integer_bits > exponent and remainder & (1 << (fractional + exponent)):
            result = _srdhm(result, multiplier)
    return INT32_MAX if a == 0 else result


def _one_over_one_plus_x(a: int) -> int:
    half_denominator = (a + INT32_MAX + 1) // 2  # RoundingHalfSum of non-negatives
    x = 1515870810 + _srdhm(half_denominator, -1010580540)
    for _ in range(3):
        x = x + _saturating_shift_left(_srdhm(x, (1 << 29) - _srdhm(half_denominator, x)), 2)
    return _saturating_shift_left(x, 1)


def _quantize_multiplier(real: float) -> tuple[int, int]:
    fraction, shift = math.frexp(real)
    fixed = round(fraction * (1 << 31))
    if fixed == 1 << 31:
        fixed, shift = fixed // 2, shift + 1
    return fixed, shift


def tflite_softmax(x: np.ndarray, input_scale: float) -> np.ndarray:
    """int8 rows -> int8 softmax, output scale 1/256 zero point -128, beta 1."""
    multiplier, left_shift = _quantize_multiplier(min(input_scale * (1 << 26), INT32_MAX))
    diff_min = -math.floor(31 * (1 << 26) / (1 << left_shift))
    out = np.full(x.shape, -128, dtype=np.int8)
    for r, row in enumerate(x.astype(np.int64)):
        top = int(row.max())
        exps = {}
        for c, value in enumerate(row):
            diff = int(value) - top
            if diff >= diff_min:
                exps[c] = _exp_on_negative_values(_srdhm(diff * (1 << left_shift), multiplier))
        total = sum(_rdbpot(e, 12) for e in exps.values())
        headroom_plus_one = 32 - total.bit_length()
        bits_over_unit = 12 - headroom_plus_one
        scale = _one_over_one_plus_x((total << headroom_plus_one) - (1 << 31))
        for c, e in exps.items():
            value = _rdbpot(_srdhm(scale, e), bits_over_unit + 31 - 8) - 128
            out[r, c] = max(-128, min(127, value))
    return out


def exact_softmax(x: np.ndarray, input_scale: float) -> np.ndarray:
    """The float64 softmax of the dequantised rows, quantised to 1/256, -128 (ties to even)."""
    logits = np.float64(np.float32(input_scale)) * x.astype(np.float64)
    exps = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = exps / exps.sum(axis=1, keepdims=True)
    return np.clip(np.rint(probabilities / OUT_SCALE) + OUT_ZP, -128, 127).astype(np.int8)


# --- the rows -------------------------------------------------------------------------------


def _rows(rng, depth: int) -> np.ndarray:
    """Random rows, then ties and extremes: all equal, one 127 among -128s, two maxima,
    alternating extremes, a narrow spread."""
    random = rng.integers(-128, 128, (24, depth))
    special = [
        np.full(depth, -128),
        np.full(depth, 127),
        np.where(np.arange(depth) == depth // 2, 127, -128),
        np.where(np.arange(depth) < 2, 127, -128),
        np.where(np.arange(depth) % 2 == 0, 127, -128),
        rng.integers(100, 104, depth),
        np.zeros(depth, dtype=np.int64),
    ]
    return np.vstack([random, *special]).astype(np.int8)


CASES = [
    # (depth, input scale)
    (1, 0.1),
    (2, 0.05),
    (10, 0.04042888),  # resnet8's logits (its FC output scale)
    (10, 0.5),
    (12, 0.004),
    (12, 2.0),  # exps underflow to 0 below the max
    (33, 0.1),  # more than one vector of lanes
    (100, 0.08),
    (1000, 0.02),
]


@pytest.mark.parametrize("depth,scale", CASES)
def test_softmax_within_one_lsb_of_tflite_and_of_the_exact_softmax(vpu_plus, scratchpad, depth, scale):
    rng = np.random.default_rng(depth * 1000 + int(scale * 1000))
    x = _rows(rng, depth)
    table = exp_table(scale, depth)
    multiplier, shift = output_multiplier(OUT_SCALE)
    assert error_bound_lsb(OUT_SCALE, depth) < 0.5
    src, tab = scratchpad.put(x), scratchpad.put(table)
    dst = scratchpad.reserve(x.nbytes)
    instruction = Softmax(
        src=src,
        dst=dst,
        table=tab,
        rows=x.shape[0],
        depth=depth,
        dst_zp=OUT_ZP,
        shift=shift,
        multiplier=multiplier,
    )
    got = scratchpad.read(scratchpad.run(vpu_plus, [instruction]), dst, x.shape, np.int8)
    np.testing.assert_array_equal(got, ref.softmax(x, table, multiplier, shift, OUT_ZP))
    for name, expected in (("TFLite", tflite_softmax(x, scale)), ("exact", exact_softmax(x, scale))):
        diff = np.abs(got.astype(np.int32) - expected.astype(np.int32))
        worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
        assert diff.max() <= 1, f"{name}: {diff.max()} LSB at row {worst[0]}: {x[worst[0]].tolist()}"


def test_the_tflite_port_is_the_kernel_tflite_runs():
    """The port's figures for one row, worked by hand: logits 0 and -1 step of 0.5, so
    p = 1 / (1 + e^-0.5) = 0.6225 -> 0.6225 * 256 - 128 = 31.4 -> 31; 0.3775 -> -31.4 -> -31."""
    got = tflite_softmax(np.array([[2, 1]], dtype=np.int8), 0.5)
    assert got.tolist() == [[31, -31]]


def test_softmax_needs_the_lookup_table(vpu, scratchpad):
    x = np.zeros((1, 10), dtype=np.int8)
    src, tab = scratchpad.put(x), scratchpad.put(exp_table(0.1, 10))
    instruction = Softmax(src=src, dst=scratchpad.reserve(10), table=tab, rows=1, depth=10, dst_zp=-128)
    with pytest.raises(SimError, match="no 256-entry lookup table"):
        scratchpad.run(vpu, [instruction])


def test_softmax_refuses_a_table_whose_row_sum_leaves_int32(vpu_plus, scratchpad):
    x = np.zeros((1, 4), dtype=np.int8)
    table = np.full(256, 1 << 30, dtype=np.int32)  # 4 * 2^30 = 2^32
    src, tab = scratchpad.put(x), scratchpad.put(table)
    instruction = Softmax(src=src, dst=scratchpad.reserve(4), table=tab, rows=1, depth=4, dst_zp=-128)
    with pytest.raises(SimError, match="beyond int32"):
        scratchpad.run(vpu_plus, [instruction])


def test_the_error_bound_refuses_long_rows_into_fine_scales():
    """docs/softmax.md: bound = (1/s_y)((1 + depth) / 2^(T+1) + 2^-29), T = 30 - floor(log2 depth):
    depth 10 into 1/256: T = 27, 256 * 11 / 2^28 = 1.05e-5 LSB; depth 4096: T = 18, about 2 LSB."""
    assert error_bound_lsb(OUT_SCALE, 10) == pytest.approx(256 * (11 / 2**28 + 2**-29))
    assert error_bound_lsb(OUT_SCALE, 4096) == pytest.approx(256 * (4097 / 2**19 + 2**-29))
    assert error_bound_lsb(OUT_SCALE, 4096) > 0.5
