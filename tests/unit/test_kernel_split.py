"""Sub-kernels of kernel rows (compiler/lower/codegen/kernel_split.py): the sum of the
pieces, each applied only to the output rows it lists with its own padding, equals the
whole conv along H (a numpy conv, written here), and every piece is within the limits."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.lower.codegen.kernel_split import ConvGeometry, Piece, row_pieces
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


@pytest.mark.parametrize("seed", range(40))
def test_the_pieces_sum_to_the_conv_within_the_limits(seed):
    rng = np.random.default_rng(seed)
    kernel, stride, dilation = int(rng.integers(1, 30)), int(rng.integers(1, 4)), int(rng.integers(1, 3))
    size = int(rng.integers(1, 60))
    before, after = int(rng.integers(0, 9)), int(rng.integers(0, 9))
    out = (size + before + after - (kernel - 1) * dilation - 1) // stride + 1
    if out < 1:
        return
    kernel_max, pad_max = int(rng.integers(1, 9)), int(rng.integers(0, 4))
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
