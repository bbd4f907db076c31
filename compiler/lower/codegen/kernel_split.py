"""Convs past the conv instruction's kernel and padding limits, as sub-kernels accumulated
in int32 (tile_mac.py emits them; the partitioner asks `split_reason`, which asks
`conv_pieces`, as mac_shape.pieces_of does, so the question has one answerer).

    conv(x, W[kh x kw], pads)  =  sum over pieces p of conv(x, W[rows, columns of p], ...)

Kernel rows. Every piece reads the same input with the kernel rows [k0, k1): its top
padding is the conv's less k0 * dilation. The first piece (the cover) takes every output
row within the padding limit and writes the accumulators (with the bias); the others add
onto them, each only over the output rows whose window reaches the input (the rows it skips
would read padding alone: (x - zp) * w = 0 there), so their padding stays within the limit
too.

Kernel columns. A conv instruction writes whole output rows (its accumulators have no row
stride), so every column piece [c0, c1) covers every output column: it reads the input
from column c0 * dilation - left on, cropped to the columns its windows reach (`src` moved
right, `in_w` narrowed, `src_row_stride` the input's row: docs/isa.md), its left and right
padding what the first and last output's windows read outside the input. Pieces are
consecutive runs of at most the kernel limit; kernel columns that read only padding for
every output are left out. Where the left or right padding is past the limit (the first or
last piece would need it), the input band is staged into a tile whose rows hold that
padding (the zero point, written by the DMA's or vector unit's copy and a fill:
tile_im2col.PaddedBand) and the pieces read the tile with no horizontal padding.

Output rows that read only padding. A conv instruction reads a band of at least one input
row, so no piece covers an output row whose whole window lies in the top or bottom padding
(its value is the requantised bias: (x - zp) * w = 0 over the window). Such a conv, and one
whose top or bottom padding no cover within the limits reaches, is staged in both axes: the
input band goes into a tile whose rows and columns hold all of the padding (the zero point,
as for the left and right padding), and the pieces are those of the padded input with no
padding at all (`Split.staged_rows`). Those output rows then read zero-point rows of the
tile and the conv instruction itself gives them the bias, requantised like every other row.

The sum is the conv's exactly: int32 accumulation, one requantisation at the end; row and
column pieces combine (every row piece times every column piece).
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.compiler.lower.codegen.tiling import halo


@dataclass(frozen=True)
class Piece:
    """Kernel rows [k0, k1), applied to output rows [o0, o1); kernel columns `cols` (None:
    all of them, the conv's own horizontal geometry)."""

    rows: tuple[int, int]
    out: tuple[int, int]
    cols: tuple[int, int] | None = None


@dataclass(frozen=True)
class ConvGeometry:
    """One axis of a conv: input and output size, kernel, stride, dilation, padding before."""

    size: int
    out: int
    kernel: int
    stride: int
    dilation: int
    pad_before: int


def _pads(g: ConvGeometry, rows: tuple[int, int], out: tuple[int, int]) -> tuple[int, int, int]:
    """(pad before, pad after, input rows) that output rows `out` need through kernel `rows`."""
    k0, k1 = rows
    i0, i1, before, after = halo(out, g.size, k1 - k0, g.stride, g.dilation, g.pad_before - k0 * g.dilation)
    return before, after, i1 - i0


def _reach(g: ConvGeometry, rows: tuple[int, int]) -> tuple[int, int]:
    """The output rows whose window through kernel `rows` reaches the input (may be empty)."""
    k0, k1 = rows
    first = [o for o in range(g.out) if o * g.stride - g.pad_before + (k1 - 1) * g.dilation >= 0]
    last = [o for o in range(g.out) if o * g.stride - g.pad_before + k0 * g.dilation <= g.size - 1]
    return (first[0], last[-1] + 1) if first and last and first[0] <= last[-1] else (0, 0)


def _fits(g: ConvGeometry, rows, out, kernel_max: int, pad_max: int, cover: bool) -> bool:
    before, after, count = _pads(g, rows, out)
    if rows[1] - rows[0] > kernel_max or before > pad_max or after > pad_max or count < 1:
        return False
    # the cover's window reaches the input on every output row, so every band has input rows
    return not cover or max(before, after) <= (rows[1] - rows[0] - 1) * g.dilation


def row_pieces(g: ConvGeometry, kernel_max: int, pad_max: int) -> list[Piece] | None:
    """The pieces covering the kernel's rows within the limits, the cover first; None if
    none do (some output row reads only padding, or more than `pad_max` rows of it through
    every cover). One piece (the whole kernel) when the conv is within the limits already."""
    whole = Piece((0, g.kernel), (0, g.out))
    if _fits(g, whole.rows, whole.out, kernel_max, pad_max, True):
        return [whole]
    cover = None
    for length in range(min(kernel_max, g.kernel), 0, -1):
        for k0 in range(g.kernel - length + 1):
            if _fits(g, (k0, k0 + length), (0, g.out), kernel_max, pad_max, True):
                cover = (k0, k0 + length)
                break
        if cover is not None:
            break
    if cover is None:
        return None
    pieces = [Piece(cover, (0, g.out))]
    for start, end in ((0, cover[0]), (cover[1], g.kernel)):
        found = _edge_pieces(g, start, end, kernel_max, pad_max)
        if found is None:
            return None
        pieces += found
    return pieces


def _edge_pieces(g: ConvGeometry, start: int, end: int, kernel_max: int, pad_max: int) -> list[Piece] | None:
    pieces, k0 = [], start
    while k0 < end:
        for length in range(min(kernel_max, end - k0), 0, -1):
            rows = (k0, k0 + length)
            out = _reach(g, rows)
            if out[1] <= out[0]:  # these kernel rows only ever read padding: nothing to add
                break
            if _fits(g, rows, out, kernel_max, pad_max, False):
                pieces.append(Piece(rows, out))
                break
        else:
            return None
        k0 += length
    return pieces


def column_window(g: ConvGeometry, cols: tuple[int, int]) -> tuple[int, int, int, int]:
    """(first input column, input columns, pad left, pad right) that every output column
    reads through kernel columns `cols` (input columns <= 0: only padding)."""
    c0, c1 = cols
    start = -g.pad_before + c0 * g.dilation
    end = (g.out - 1) * g.stride - g.pad_before + (c1 - 1) * g.dilation  # the last one read
    first, last = max(0, start), min(g.size - 1, end)
    return first, last - first + 1, first - start, end - last


def column_pieces(g: ConvGeometry, kernel_max: int, pad_max: int) -> list[tuple[int, int]] | None:
    """Kernel column runs of at most `kernel_max`, each within the padding limit; None if the
    left or right padding is past it (then the input is staged, padded: `conv_pieces`)."""
    useful = [k for k in range(g.kernel) if column_window(g, (k, k + 1))[1] >= 1]
    if not useful:
        return None
    pieces = [(k, min(k + kernel_max, useful[-1] + 1)) for k in range(useful[0], useful[-1] + 1, kernel_max)]
    for cols in pieces:
        _, count, left, right = column_window(g, cols)
        if count < 1 or left > pad_max or right > pad_max:
            return None
    return pieces


@dataclass(frozen=True)
class Split:
    """How a conv runs within the limits: its pieces (the cover first) and whether its input
    is staged into a tile holding the left and right padding (then the column pieces are of
    the staged geometry: no horizontal padding), and with `staged_rows` the top and bottom
    padding too (then the row pieces are of the padded height: no padding at all)."""

    pieces: list[Piece]
    staged: bool
    staged_rows: bool = False


def conv_pieces(
    kernel, padding, strides, dilation, in_hw, out_hw, kernel_max: int, pad_max: int
) -> Split | None:
    """The pieces of a conv (kernel (kh, kw), padding (top, left, bottom, right)) within the
    limits, or None if none cover it; one piece, the whole kernel, when it is within them."""
    (kh, kw), (top, left, bottom, right) = kernel, padding
    height = ConvGeometry(in_hw[0], out_hw[0], kh, strides[0], dilation[0], top)
    rows = row_pieces(height, kernel_max, pad_max)
    if rows is None:  # staged in both axes: the padded input, no padding (see the docstring)
        padded = ConvGeometry(in_hw[0] + top + bottom, out_hw[0], kh, strides[0], dilation[0], 0)
        rows = row_pieces(padded, kernel_max, 0)
        cols = _staged_columns(kw, (left, right), strides[1], dilation[1], in_hw[1], out_hw[1], kernel_max)
        if rows is None or cols is None:
            return None
        return Split([Piece(r.rows, r.out, c) for r in rows for c in cols], True, True)
    if kw <= kernel_max and max(left, right) <= pad_max:
        return Split(rows, False)
    width = ConvGeometry(in_hw[1], out_hw[1], kw, strides[1], dilation[1], left)
    cols, staged = column_pieces(width, kernel_max, pad_max), False
    if cols is None:  # the staged tile: the padded row, no horizontal padding
        cols = _staged_columns(kw, (left, right), strides[1], dilation[1], in_hw[1], out_hw[1], kernel_max)
        staged = True
        if cols is None:
            return None
    return Split([Piece(r.rows, r.out, c) for r in rows for c in cols], staged)


def _staged_columns(kw, pads, stride, dilation, width, out, kernel_max) -> list[tuple[int, int]] | None:
    """The column pieces over a staged tile's rows: the padded row, no horizontal padding."""
    padded = ConvGeometry(width + pads[0] + pads[1], out, kw, stride, dilation, 0)
    return column_pieces(padded, kernel_max, 0)


def _padding_only(g: ConvGeometry) -> str | None:
    """The output rows whose whole window lies in the top or bottom padding, as "0-3 and
    25-28" (None if there are none)."""
    first, end = _reach(g, (0, g.kernel))
    runs = [(0, first), (end, g.out)] if end > first else [(0, g.out)]
    runs = [f"{a}" if b - a == 1 else f"{a}-{b - 1}" for a, b in runs if b > a]
    return " and ".join(runs) or None


def conv_limits(target) -> tuple[int, int]:
    """(largest kernel, largest padding) of the target's conv instruction."""
    limits = target.op_limits("conv2d")
    return int(limits.get("kernel", [1, 255])[1]), int(limits.get("padding", [0, 255])[1])


def split_reason(kernel, padding, strides, dilation, in_hw, out_hw, target) -> tuple[str | None, str | None]:
    """(how the conv is decomposed or None when it needs no decomposition, why not or None)."""
    kernel_max, pad_max = conv_limits(target)
    (kh, kw) = kernel
    split = conv_pieces(kernel, padding, strides, dilation, in_hw, out_hw, kernel_max, pad_max)
    if split is None:
        return None, f"no decomposition: no sub-kernels of at most {kernel_max} rows and columns cover it"
    if not split.staged and split.pieces == [Piece((0, kh), (0, out_hw[0]))]:
        return None, None
    rows = sorted({p.rows for p in split.pieces})
    cols = sorted({p.cols or (0, kw) for p in split.pieces})
    parts = []
    if len(rows) > 1:
        parts.append(" + ".join(str(r[1] - r[0]) for r in rows) + f" of its {kh} rows")
    if len(cols) > 1 or cols[0] != (0, kw):
        parts.append(" + ".join(str(c[1] - c[0]) for c in cols) + f" of its {kw} columns")
    staged = ""
    if split.staged_rows:
        height = ConvGeometry(in_hw[0], out_hw[0], kh, strides[0], dilation[0], padding[0])
        only = _padding_only(height)
        why = f": output rows {only} read only padding and compute the bias" if only else ""
        staged = f"; its input staged into a tile holding all of its padding (zero point){why}"
    elif split.staged:
        staged = "; its input staged into a tile holding the left/right padding (zero point)"
    shape = f" ({' x '.join(parts)})" if parts else ""
    count = len(split.pieces)
    how = f"{count} sub-kernels{shape} accumulated in int32, requantised once" if count > 1 else "one conv"
    return f"decomposed: {kh}x{kw} kernel with padding {list(padding)} as {how} (exact){staged}", None
