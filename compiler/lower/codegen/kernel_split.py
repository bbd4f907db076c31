"""Convs past the conv instruction's kernel and padding limits, as sub-kernels of kernel
rows accumulated in int32 (tile_mac.py emits them; the partitioner asks `row_pieces` whether
a conv can be covered, so the question has one answerer).

    conv(x, W[kh x kw], pad top/bottom)  =  sum over pieces p of conv(x, W[rows of p], ...)

Every piece reads the same input with the kernel rows [k0, k1): its top padding is the
conv's less k0 * dilation. The first piece (the cover) takes every output row within the
padding limit and writes the accumulators (with the bias); the others add onto them, each
only over the output rows whose window reaches the input (the rows it skips would read
padding alone: (x - zp) * w = 0 there), so their padding stays within the limit too. The
sum is the conv's exactly: int32 accumulation, one requantisation at the end.

Not covered (the op stays on the CPU, with the reason): kernel width or left/right padding
past the limits (a conv instruction reads whole input rows and writes whole output rows,
so columns cannot be cropped), and a conv whose outputs near an edge read so much padding
that no piece within the limits covers them.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.compiler.lower.codegen.tiling import halo


@dataclass(frozen=True)
class Piece:
    """Kernel rows [k0, k1), applied to output rows [o0, o1)."""

    rows: tuple[int, int]
    out: tuple[int, int]


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
    none do. One piece (the whole kernel) when the conv is within the limits already."""
    whole = Piece((0, g.kernel), (0, g.out))
    if _fits(g, whole.rows, whole.out, kernel_max, pad_max, False):
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


def conv_limits(target) -> tuple[int, int]:
    """(largest kernel, largest padding) of the target's conv instruction."""
    limits = target.op_limits("conv2d")
    return int(limits.get("kernel", [1, 255])[1]), int(limits.get("padding", [0, 255])[1])


def split_reason(kernel, padding, strides, dilation, in_hw, out_hw, target) -> tuple[str | None, str | None]:
    """(how the conv is decomposed or None when it needs no decomposition, why not or None)."""
    kernel_max, pad_max = conv_limits(target)
    (kh, kw), (top, left, _, right) = kernel, padding
    if kh <= kernel_max and kw <= kernel_max and max(padding) <= pad_max:
        return None, None
    if kw > kernel_max or max(left, right) > pad_max:
        return None, (
            f"no decomposition: only kernel rows are split into sub-kernels (a conv instruction "
            f"reads whole input rows and writes whole output rows), and this conv's kernel width "
            f"{kw} or left/right padding {left}/{right} is past the limit ({kernel_max}, {pad_max})"
        )
    g = ConvGeometry(in_hw[0], out_hw[0], kh, strides[0], dilation[0], top)
    pieces = row_pieces(g, kernel_max, pad_max)
    if pieces is None:
        return None, (
            f"no decomposition: no sub-kernels of at most {kernel_max} rows cover the {kh}-row kernel "
            f"with at most {pad_max} rows of padding (some outputs read too much padding)"
        )
    sizes = " + ".join(str(p.rows[1] - p.rows[0]) for p in sorted(pieces, key=lambda p: p.rows))
    return (
        f"decomposed: {kh}x{kw} kernel with padding {list(padding)} as {len(pieces)} sub-kernels "
        f"({sizes} of its {kh} rows) accumulated in int32, requantised once (exact)"
    ), None
