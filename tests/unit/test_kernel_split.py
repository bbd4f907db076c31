"""Sub-kernels of kernel rows and columns (compiler/lower/codegen/kernel_split.py): the sum
of the pieces, each applied only to the output rows it lists with its own padding (a column
piece: to every output column, over the input cropped to the columns it reads), equals the
whole conv along H or W (a numpy conv, written here), and every piece is within the limits."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.lower.codegen.kernel_split import (
    ConvGeometry,
    Piece,
    column_pieces,
    column_window,
    conv_pieces,
    row_pieces,
)
from vpuc.compiler.lower.codegen.tiling import halo


def _conv_rows(x, w, stride, dilation, pad_before, out):
    """y[o] = sum_k x[o * stride - pad_before + k * dilation] w[k], x zero outside."""
    y = np.zeros(out, np.int64)
    for o in range(out):
        for k, wk in enumerate(w):
            i = o * stride - pad_before + k * dilation
            if 0 <= i < len(x):
                y[o] += x[i] * wk
    return y


def test_the_kws_first_conv_splits_as_computed_by_hand():
    """49 rows, 10-row kernel, stride 2, 4 rows of padding above and 5 below, limits 7/3:
    rows 1-7 cover every output (3 pad rows above row 0, 3 below row 24); row 0 reaches
    the input from output 2 on; rows 8-9 up to output 22, which needs 1 pad row."""
    g = ConvGeometry(size=49, out=25, kernel=10, stride=2, dilation=1, pad_before=4)
    assert row_pieces(g, 7, 3) == [Piece((1, 8), (0, 25)), Piece((0, 1), (2, 25)), Piece((8, 10), (0, 23))]


def _random_conv(rng, max_pad: int):
    """(size, out, kernel, stride, dilation, pads before and after, kernel limit, pad limit), or None
    when the drawn conv has no output."""
    kernel, stride, dilation = int(rng.integers(1, 30)), int(rng.integers(1, 4)), int(rng.integers(1, 3))
    size = int(rng.integers(1, 60))
    before, after = int(rng.integers(0, max_pad)), int(rng.integers(0, max_pad))
    out = (size + before + after - (kernel - 1) * dilation - 1) // stride + 1
    if out < 1:
        return None
    return (
        size,
        out,
        kernel,
        stride,
        dilation,
        before,
        after,
        int(rng.integers(1, 9)),
        int(rng.integers(0, 4)),
    )


@pytest.mark.parametrize("seed", range(40))
def test_the_pieces_sum_to_the_conv_within_the_limits(seed):
    rng = np.random.default_rng(seed)
    drawn = _random_conv(rng, 9)
    if drawn is None:
        return
    size, out, kernel, stride, dilation, before, after, kernel_max, pad_max = drawn
    g = ConvGeometry(size, out, kernel, stride, dilation, before)
    pieces = row_pieces(g, kernel_max, pad_max)
    if pieces is None:
        return
    x, w = rng.integers(-128, 128, size), rng.integers(-127, 128, kernel)
    total = np.zeros(out, np.int64)
    assert pieces[0].out == (0, out)  # the cover writes every accumulator first
    for piece in pieces:
        (k0, k1), (o0, o1) = piece.rows, piece.out
        i0, i1, top, bottom = halo((o0, o1), size, k1 - k0, stride, dilation, before - k0 * dilation)
        if len(pieces) > 1:
            assert k1 - k0 <= kernel_max and top <= pad_max and bottom <= pad_max and i1 > i0
        total[o0:o1] += _conv_rows(x, w[k0:k1], stride, dilation, before - k0 * dilation, out)[o0:o1]
    np.testing.assert_array_equal(total, _conv_rows(x, w, stride, dilation, before, out))


def _conv_cols(x, w, stride, dilation, g, cols):
    """One column piece as the conv instruction runs it: the input cropped to the columns
    column_window gives, its own left and right padding, every output column."""
    first, count, left, right = column_window(g, cols)
    crop = x[first : first + count]
    out = (count + left + right - (cols[1] - cols[0] - 1) * dilation - 1) // stride + 1
    assert out == g.out  # a conv instruction writes whole output rows
    return _conv_rows(crop, w[cols[0] : cols[1]], stride, dilation, left, out)


@pytest.mark.parametrize("seed", range(60))
def test_the_column_pieces_sum_to_the_conv_within_the_limits(seed):
    rng = np.random.default_rng(seed)
    drawn = _random_conv(rng, 12)
    if drawn is None:
        return
    size, out, kernel, stride, dilation, before, after, kernel_max, pad_max = drawn
    x, w = rng.integers(-128, 128, size), rng.integers(-127, 128, kernel)
    want = _conv_rows(x, w, stride, dilation, before, out)
    g = ConvGeometry(size, out, kernel, stride, dilation, before)
    pieces = column_pieces(g, kernel_max, pad_max)
    if pieces is None:  # staged: the padded row, read with no horizontal padding
        assert column_window(g, (0, 1))[2] > pad_max or column_window(g, (kernel - 1, kernel))[3] > pad_max
        x = np.concatenate([np.zeros(before, x.dtype), x, np.zeros(after, x.dtype)])
        g = ConvGeometry(size + before + after, out, kernel, stride, dilation, 0)
        pieces = column_pieces(g, kernel_max, 0)
    total = np.zeros(out, np.int64)
    for cols in pieces:
        _, count, left, right = column_window(g, cols)
        assert cols[1] - cols[0] <= kernel_max and left <= pad_max and right <= pad_max and count >= 1
        total += _conv_cols(x, w, stride, dilation, g, cols)
    np.testing.assert_array_equal(total, want)


def test_a_1x9_kernel_with_4_columns_of_padding_as_computed_by_hand():
    """14 columns, 1x9 kernel, padding 4 each side, limits 7/3: 7 + 2 columns; the first
    piece reads from column -4 (4 of padding, past 3): the input is staged, padded to 22
    columns, and the pieces read columns 0.. and 7.. of it with no padding."""
    args = ((1, 9), (0, 4, 0, 4), (1, 1), (1, 1), (1, 14), (1, 14))
    split = conv_pieces(*args, 7, 3)
    assert split.staged and [p.cols for p in split.pieces] == [(0, 7), (7, 9)]
    g = ConvGeometry(22, 14, 9, 1, 1, 0)
    assert [column_window(g, c) for c in [(0, 7), (7, 9)]] == [(0, 20, 0, 0), (7, 15, 0, 0)]
    # within the padding limit of 7 (u55-256), 8 + 1 columns read the input itself
    split = conv_pieces(*args, 8, 7)
    assert not split.staged and [p.cols for p in split.pieces] == [(0, 8), (8, 9)]
    assert column_window(ConvGeometry(14, 14, 9, 1, 1, 4), (8, 9)) == (4, 10, 0, 4)


@pytest.mark.parametrize("seed", range(150))  # (about 1 draw in 7 has such rows)
def test_rows_that_read_only_padding_are_covered_over_the_padded_input(seed):
    """Where no row pieces cover the conv (an output row reads only padding, or more than
    the limit of it through every cover), conv_pieces stages the input in both axes: the
    row pieces are those of the padded input, no padding, within the kernel limit, and
    they sum to the conv (the zero rows give the padding-only rows nothing: the bias)."""
    rng = np.random.default_rng(100 + seed)
    drawn = _random_conv(rng, 12)
    if drawn is None:
        return
    size, out, kernel, stride, dilation, before, after, kernel_max, pad_max = drawn
    g = ConvGeometry(size, out, kernel, stride, dilation, before)
    if row_pieces(g, kernel_max, pad_max) is not None:
        return
    split = conv_pieces((kernel, 1), (before, 0, after, 0), (stride, 1), (dilation, 1), (size, 1), (out, 1),
                        kernel_max, pad_max)  # fmt: skip
    assert split is not None and split.staged and split.staged_rows
    x, w = rng.integers(-128, 128, size), rng.integers(-127, 128, kernel)
    padded = np.concatenate([np.zeros(before, x.dtype), x, np.zeros(after, x.dtype)])
    total = np.zeros(out, np.int64)
    for piece in split.pieces:
        (k0, k1), (o0, o1) = piece.rows, piece.out
        i0, i1, top, bottom = halo((o0, o1), len(padded), k1 - k0, stride, dilation, -k0 * dilation)
        assert k1 - k0 <= kernel_max and top == bottom == 0 and i1 > i0
        total[o0:o1] += _conv_rows(padded, w[k0:k1], stride, dilation, -k0 * dilation, out)[o0:o1]
    np.testing.assert_array_equal(total, _conv_rows(x, w, stride, dilation, before, out))


def test_the_padding_only_rows_of_a_1x1_conv_as_computed_by_hand():
    """20 rows, 1x1 kernel, 6 rows of padding above and below: outputs 0-5 and 26-31 read
    padding alone; staged, one piece over the 32 padded rows."""
    split = conv_pieces((1, 1), (6, 0, 6, 0), (1, 1), (1, 1), (20, 20), (32, 20), 7, 3)
    assert split.staged_rows and split.pieces == [Piece((0, 1), (0, 32), (0, 1))]
