"""The gathers of tile_im2col.py (its docstring gives the lowering): how a conv's input
windows or kernel rows are copied by DMA into the patches a 1x1 conv reads. Gather, the
whole window per pixel; RowGather, one kernel row per pixel; ColumnWindow and ColumnCopy,
a kernel's columns side by side."""

from __future__ import annotations

from dataclasses import dataclass

from vpuc.compiler.lower.codegen import transfer
from vpuc.compiler.lower.codegen.plan import Addr, Spec, View
from vpuc.compiler.lower.codegen.tiling import Events, spec_cycles
from vpuc.compiler.lower.codegen.transfer import _dma
from vpuc.targets.isa.formats import Clip, Opcode

# Whether a gather keeps the events of each band it built (Gather._band) for the next
# candidate of the search; off, every build makes and costs them again (the same events).
BAND_MEMO = True


@dataclass(frozen=True)
class Gather:
    """The patches of one conv's input view; called per input band by tile_mac.build_mac."""

    view: View
    source: str  # the input tensor's name (its ready time)
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    out: tuple[int, int]  # output rows, columns
    zero_point: int

    kind = "patches"

    @property
    def channels(self) -> int:
        return self.view.shape[3]

    @property
    def patch_bytes(self) -> int:
        return self.kernel[0] * self.kernel[1] * self.channels

    @property
    def unit(self) -> int:
        """Bytes of one input column within a run: C (NHWC) or 1 (NCHW)."""
        return 1 if self.view.nchw else self.channels

    @property
    def pitch(self) -> int:
        """DRAM bytes from one input row to the next within a run's plane."""
        return self.view.shape[2] * self.unit

    @property
    def tile_shape(self) -> tuple[int, int]:
        """(pixels per tile row, bytes per pixel) of the tile the gather writes."""
        return self.out[1], self.patch_bytes

    # (src_stride, src_row_stride) of the conv over the tile: dense
    in_place = (0, 0)

    def band_bytes(self, rows: int) -> int:
        """Tile bytes of `rows` rows."""
        return rows * self.tile_shape[0] * self.tile_shape[1]

    # what moves the band: DMA loads ("load"), or the vector unit's copies (ColumnCopy)
    moves = "load"

    def __call__(self, ev: Events, n: int, rows: tuple[int, int], tile: Addr, key: float) -> None:
        """The band's events: the zero-point fill where it has padding, then its moves (none
        when every window of the band lies in the padding, all of it the fill)."""
        fill, moves = self._band(ev.ctx.target, n, rows, tile)
        writes = [(tile.base, tile.slot)]
        if fill is not None:
            ev.add("vector", [fill[0]], key - 0.25, writes=writes, cycles=fill[1])
        if moves[0]:
            ev.add(self.moves, list(moves[0]), key, writes=writes, tensors=[self.source], cycles=moves[1])

    def _band(self, target, n: int, rows: tuple[int, int], tile: Addr):
        """((fill spec, its cycles) or None, (the moves' specs, their cycles)) of a band,
        kept per (image, rows, tile slot) while the target's hardware is the same (BAND_MEMO):
        a search builds each band for every candidate of its height (spec_cycles' sums, the
        same as Events.add's)."""
        memo = self.__dict__.get("_bands")
        if memo is None or memo[0] is not target.hardware or not BAND_MEMO:
            memo = (target.hardware, {})
            object.__setattr__(self, "_bands", memo)  # (frozen: fields unchanged, no field)
        found = memo[1].get((n, rows, tile))
        if found is None:
            fill = None
            if self.padded(rows):
                count, zp = self.band_bytes(rows[1] - rows[0]), self.zero_point
                spec = Spec(Clip, dict(src=tile, dst=tile, count=count, clamp_min=zp, clamp_max=zp))
                fill = (spec, spec_cycles(spec, target))
            specs = tuple(self.specs(n, rows, tile))
            found = memo[1][(n, rows, tile)] = (fill, (specs, sum([spec_cycles(s, target) for s in specs])))
        return found

    def padded(self, rows: tuple[int, int]) -> bool:
        """Whether some window of output rows `rows` reads padding."""
        (x0, x1), _ = self.columns()
        inside = all(self.reach(ky, rows) == rows for ky in range(self.kernel[0]))
        return not inside or x0 > 0 or x1 < self.out[1]

    def reach(self, ky: int, rows: tuple[int, int]) -> tuple[int, int]:
        """The output rows of `rows` whose kernel row ky reads an input row (may be empty)."""
        height, sh, top = self.view.shape[1], self.strides[0], self.pads[0]
        first = max(rows[0], -(-(top - ky) // sh))
        last = min(rows[1], (height - 1 + top - ky) // sh + 1)
        return (first, max(first, last))

    def columns(self) -> tuple[tuple[int, int], list[tuple[int, int, int]]]:
        """The output columns whose window is inside the input ([x0, x1)), and every other
        output column as (x, kx0, kx1): the kernel columns inside (none: left out)."""
        width, kw, sw, left = self.view.shape[2], self.kernel[1], self.strides[1], self.pads[1]
        x0 = min(self.out[1], -(-left // sw))
        x1 = max(x0, min(self.out[1], (width - kw + left) // sw + 1))
        edges = []
        for x in [*range(x0), *range(x1, self.out[1])]:
            start = x * sw - left
            kx0, kx1 = max(0, -start), min(kw, width - start)
            if kx0 < kx1:
                edges.append((x, kx0, kx1))
        return (x0, x1), edges

    def specs(self, n: int, rows: tuple[int, int], tile: Addr) -> list[Spec]:
        (x0, x1), edges = self.columns()
        found = []
        for c in range(self.channels if self.view.nchw else 1):
            for ky in range(self.kernel[0]):
                y0, y1 = self.reach(ky, rows)
                if y0 < y1 and x0 < x1:
                    found.append(self._interior(n, c, ky, (y0, y1), (x0, x1), rows[0], tile))
            for x, kx0, kx1 in edges:
                for kys, (y0, y1) in self._reach_groups(rows):
                    found.append(self._edge(n, c, kys, (y0, y1), (x, kx0, kx1), rows[0], tile))
        return found

    def _reach_groups(self, rows: tuple[int, int]):
        """Consecutive kernel rows with the same non-empty reach, as ((ky0, ky1), reach)."""
        groups: list[tuple[tuple[int, int], tuple[int, int]]] = []
        for ky in range(self.kernel[0]):
            reach = self.reach(ky, rows)
            if reach[0] >= reach[1]:
                continue
            if groups and groups[-1][1] == reach and groups[-1][0][1] == ky:
                groups[-1] = ((groups[-1][0][0], ky + 1), reach)
            else:
                groups.append(((ky, ky + 1), reach))
        return groups

    def _dram(self, n: int, c: int, y: int, ky: int, x: int, kx: int) -> Addr:
        """The DRAM byte of input row y*sh + ky - top, column x*sw + kx - left (channel c
        for NCHW; channel 0 for NHWC)."""
        view, (sh, sw) = self.view, self.strides
        _, height, width, depth = view.shape
        iy, ix = y * sh + ky - self.pads[0], x * sw + kx - self.pads[1]
        if view.nchw:
            return Addr(view.storage, view.offset + ((n * depth + c) * height + iy) * width + ix)
        return Addr(view.storage, view.pixel_offset(n, iy, ix))

    def _sram(self, tile: Addr, row0: int, c: int, y: int, ky: int, x: int, kx: int) -> Addr:
        kh, kw = self.kernel
        segment = (c * kh + ky) * kw if self.view.nchw else ky * kw * self.channels
        return tile + ((y - row0) * self.out[1] + x) * self.patch_bytes + segment + kx * self.unit

    def _interior(self, n, c, ky, ys, xs, row0, tile) -> Spec:
        """Output rows ys x columns xs, kernel row ky: planes of rows of whole runs."""
        (y0, y1), (x0, x1) = ys, xs
        K, ow = self.patch_bytes, self.out[1]
        return _dma(
            Opcode.LOAD, self._dram(n, c, y0, ky, x0, 0), self._sram(tile, row0, c, y0, ky, x0, 0),
            self.kernel[1] * self.unit, x1 - x0, self.strides[1] * self.unit, K,
            planes=y1 - y0, dram_plane=self.strides[0] * self.pitch, sram_plane=ow * K,
        )  # fmt: skip

    def _edge(self, n, c, kys, ys, column, row0, tile) -> Spec:
        """Output column x, rows ys, kernel rows kys: the kernel columns inside the input."""
        (ky0, ky1), (y0, y1), (x, kx0, kx1) = kys, ys, column
        segment = self.kernel[1] * self.unit  # SRAM bytes from one kernel row to the next
        return _dma(
            Opcode.LOAD, self._dram(n, c, y0, ky0, x, kx0), self._sram(tile, row0, c, y0, ky0, x, kx0),
            (kx1 - kx0) * self.unit, ky1 - ky0, self.pitch, segment,
            planes=y1 - y0, dram_plane=self.strides[0] * self.pitch,
            sram_plane=self.out[1] * self.patch_bytes,
        )  # fmt: skip


@dataclass(frozen=True)
class RowGather(Gather):
    """The kernel rows only: tile pixel (y, x) holds input column x of the kh input rows
    output row y reads, (ky, c) innermost (kh*C bytes); a 1 x kw conv over it (the conv
    instruction pads left and right) is the conv. One load per kernel row (NHWC) or per
    (c, ky) (NCHW): planes output rows, rows input columns of C bytes (NCHW: 1 byte)."""

    kind = "rows"

    @property
    def tile_shape(self) -> tuple[int, int]:
        return self.view.shape[2], self.kernel[0] * self.channels

    def padded(self, rows: tuple[int, int]) -> bool:
        return not all(self.reach(ky, rows) == rows for ky in range(self.kernel[0]))

    def specs(self, n: int, rows: tuple[int, int], tile: Addr) -> list[Spec]:
        view, kh, sh = self.view, self.kernel[0], self.strides[0]
        _, height, width, depth = view.shape
        pixel = kh * depth
        found = []
        for c in range(depth if view.nchw else 1):
            for ky in range(kh):
                y0, y1 = self.reach(ky, rows)
                if y0 >= y1:
                    continue
                iy = y0 * sh + ky - self.pads[0]
                if view.nchw:
                    dram = Addr(view.storage, view.offset + ((n * depth + c) * height + iy) * width)
                else:
                    dram = Addr(view.storage, view.pixel_offset(n, iy))
                sram = tile + (y0 - rows[0]) * width * pixel + ky * depth + c
                planes = dict(planes=y1 - y0, dram_plane=sh * self.pitch, sram_plane=width * pixel)
                found.append(_dma(Opcode.LOAD, dram, sram, self.unit, width, self.unit, pixel, **planes))
        return found


@dataclass(frozen=True)
class ColumnWindow(Gather):
    """The kernel columns in place: the input band is loaded as it is (whole rows, one run
    each) into a tile padded left and right with the zero point, and a kh x 1 conv reads it
    with pixel stride C and in_c = kw*C, so that its pixel x is the kw input pixels
    x .. x+kw-1 side by side (docs/isa.md, "conv"); the OHWI weights are already in that
    order. Called with input rows (the conv's halo), not output rows.

    With `pack` P > 1 a wide pixel holds the windows of P neighbouring output columns,
    ((P-1)*sw + kw)*C bytes from P*sw*C apart, and the conv's P*O outputs are those P
    columns' O channels each (block-diagonal weights: zeros outside each column's window),
    so that its int32 tile (out_h, ow/P, P*O) is the (out_h, ow, O) one byte for byte: a
    layer with few output channels fills the array's columns."""

    pack: int = 1

    @property
    def kind(self) -> str:
        return "columns" if self.pack == 1 else "packed"

    @property
    def padded_width(self) -> int:
        return self.view.shape[2] + self.pads[1] + self.pads[3]

    @property
    def tile_shape(self) -> tuple[int, int]:
        """(pixels per tile row, bytes per pixel) as the conv reads the tile."""
        span = (self.pack - 1) * self.strides[1] + self.kernel[1]
        return self.out[1] // self.pack, span * self.channels

    @property
    def in_place(self) -> tuple[int, int]:
        return self.pack * self.strides[1] * self.channels, self.padded_width * self.channels

    def band_bytes(self, rows: int) -> int:
        return rows * self.padded_width * self.channels

    def padded(self, rows: tuple[int, int]) -> bool:
        return self.pads[1] > 0 or self.pads[3] > 0

    def specs(self, n: int, rows: tuple[int, int], tile: Addr) -> list[Spec]:
        """One load: input rows `rows`, each W*C contiguous bytes, into the tile's rows."""
        view, (r0, r1) = self.view, rows
        _, height, width, depth = view.shape
        sram = tile + self.pads[1] * depth
        row_bytes, pitch = width * depth, self.padded_width * depth
        if view.nchw:  # the channel planes' rows, interleaved into the tile's rows
            dram = Addr(view.storage, view.offset + (n * depth * height + r0) * width)
            return [transfer.interleave(dram, sram, width, r1 - r0, depth, height * width, pitch)]
        dram = Addr(view.storage, view.pixel_offset(n, r0))
        if r1 - r0 == 1 or row_bytes == pitch:
            return [_dma(Opcode.LOAD, dram, sram, (r1 - r0) * row_bytes)]
        return [_dma(Opcode.LOAD, dram, sram, row_bytes, r1 - r0, self.pitch, pitch)]


@dataclass(frozen=True)
class ColumnCopy(ColumnWindow):
    """The column window of an input resident in SRAM (the DMA reaches DRAM only): the
    vector unit copies the band's rows into the padded tile, one clip of the full range a
    row (W*C contiguous bytes: channels-last, pixels adjacent)."""

    moves = "vector"

    def specs(self, n: int, rows: tuple[int, int], tile: Addr) -> list[Spec]:
        view, pitch = self.view, self.in_place[1]
        row_bytes = view.shape[2] * self.channels
        found = []
        for r in range(*rows):
            src = Addr(view.storage, view.pixel_offset(n, r))
            dst = tile + (r - rows[0]) * pitch + self.pads[1] * self.channels
            found.append(Spec(Clip, dict(src=src, dst=dst, count=row_bytes, clamp_min=-128, clamp_max=127)))
        return found
