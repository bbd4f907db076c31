"""DMA specs for the tiler: a band of rows (and a range of channels) of a tensor view,
between DRAM and a contiguous SRAM tile, splitting what the ISA's field ranges cannot hold.

Layout changes at the subgraph's edges are done here, by the DMA's strides, not by a pass
over the data: a channels-first (NCHW) view is loaded into the channels-last tile by one
interleaving load (Dma.interleave: each channel's rows are one contiguous DRAM run, the
tile is written in whole runs); stores of one are gathered channel by channel.
"""

from __future__ import annotations

from vpuc.compiler.lower.codegen.plan import BLOB_PREFIX, Addr, Spec, View
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets.isa.formats import Dma, Opcode

MAX_ROWS = (1 << 16) - 1  # rows and planes are 16-bit fields
MAX_ROW_BYTES = (1 << 32) - 1


def band(
    opcode: Opcode, view: View, n: int, rows: tuple[int, int], channels: tuple[int, int], tile: Addr
) -> list[Spec]:
    """Move rows [r0, r1) x every column x channels [c0, c1) of image n of `view` to
    (LOAD) or from (STORE) a contiguous SRAM tile at `tile`."""
    (r0, r1), (c0, c1) = rows, channels
    _, height, width, depth = view.shape
    count = c1 - c0
    if view.nchw and opcode == Opcode.LOAD:
        plane = Addr(view.storage, view.offset + ((n * depth + c0) * height + r0) * width)
        return [interleave(plane, tile, (r1 - r0) * width, 1, count, height * width, 0)]
    if view.nchw:
        return [
            spec
            for c in range(c0, c1)
            for spec in _block(
                opcode,
                Addr(view.storage, view.offset + ((n * depth + c) * height + r0) * width),
                tile + (c - c0),
                row_bytes=1,
                rows=r1 - r0,
                columns=width,
                dram_pixel=1,
                sram_pixel=count,
            )
        ]
    dram = Addr(view.storage, view.pixel_offset(n, r0) + c0)
    if view.pixel_stride == count:  # whole pixels, adjacent: one contiguous run
        nbytes = (r1 - r0) * width * count
        if nbytes > MAX_ROW_BYTES:
            raise LowerError(f"a band of {nbytes} bytes (at most {MAX_ROW_BYTES} in one transfer)")
        return [_dma(opcode, dram, tile, row_bytes=nbytes)]
    return _block(opcode, dram, tile, count, r1 - r0, width, view.pixel_stride, count)


def _block(
    opcode: Opcode,
    dram: Addr,
    sram: Addr,
    row_bytes: int,
    rows: int,
    columns: int,
    dram_pixel: int,
    sram_pixel: int,
) -> list[Spec]:
    """rows x columns pixels of `row_bytes`, `dram_pixel` / `sram_pixel` bytes apart."""
    pixels = rows * columns
    if pixels <= MAX_ROWS:
        return [_dma(opcode, dram, sram, row_bytes, pixels, dram_pixel, sram_pixel)]
    if columns > MAX_ROWS:
        raise LowerError(f"a row of {columns} pixels (at most {MAX_ROWS} in one transfer)")
    per = max(1, MAX_ROWS // columns)
    specs = []
    for r in range(0, rows, per):
        planes = min(per, rows - r)
        specs.append(
            _dma(
                opcode,
                dram + r * columns * dram_pixel,
                sram + r * columns * sram_pixel,
                row_bytes,
                columns,
                dram_pixel,
                sram_pixel,
                planes=planes,
                dram_plane=columns * dram_pixel,
                sram_plane=columns * sram_pixel,
            )
        )
    return specs


def _dma(
    opcode: Opcode,
    dram: Addr,
    sram: Addr,
    row_bytes: int,
    rows: int = 1,
    dram_row: int = 0,
    sram_row: int = 0,
    planes: int = 1,
    dram_plane: int = 0,
    sram_plane: int = 0,
) -> Spec:
    fields = {"opcode": opcode, "dram": dram, "sram": sram, "row_bytes": row_bytes, "rows": rows}
    if dram.base.startswith(BLOB_PREFIX):  # a layer's weights, parameters or table
        fields["region"] = 1  # the constant region: flash where the target keeps weights there
    if rows > 1:
        fields.update(dram_row_stride=dram_row, sram_row_stride=sram_row)
    if planes > 1:
        fields.update(planes=planes, dram_plane_stride=dram_plane, sram_plane_stride=sram_plane)
    return Spec(Dma, fields)


def interleave(
    dram: Addr, sram: Addr, row_bytes: int, rows: int, planes: int, dram_plane: int, sram_row: int
) -> Spec:
    """Load `planes` channel planes (rows x row_bytes each, rows adjacent in DRAM, planes
    dram_plane bytes apart) channels-last: byte x of row r of plane p to
    sram + r*sram_row + x*planes + p (Dma.interleave; one plane: a plain load)."""
    if planes == 1:
        return _dma(Opcode.LOAD, dram, sram, row_bytes, rows, row_bytes, sram_row)
    if rows * row_bytes > MAX_ROW_BYTES or planes > MAX_ROWS:
        raise LowerError(f"an interleaving load of {planes} planes of {rows * row_bytes} bytes")
    fields = {"opcode": Opcode.LOAD, "dram": dram, "sram": sram, "row_bytes": row_bytes, "rows": rows}
    fields.update(planes=planes, dram_plane_stride=dram_plane, interleave=1)
    if rows > 1:
        fields.update(dram_row_stride=row_bytes, sram_row_stride=sram_row)
    return Spec(Dma, fields)


def contiguous(opcode: Opcode, dram: Addr, sram: Addr, nbytes: int) -> Spec:
    """One contiguous block (weights, tables, parameters)."""
    return _dma(opcode, dram, sram, nbytes)
