"""Default schedules: what every host kernel gets when no tuning record covers it.

After LegalizeOps + FuseOps + FuseTIR (compiler/host/tasks.py) each host kernel is a TIR
PrimFunc whose loops run in the order the op was written, one scalar at a time, on one
core. TVM 0.27 has no CPU schedule that fits them (dlight's CPU rules cover GEMV and
row reductions only, and measured slower than none on the zoo; MetaSchedule's design space
has no default point: one random sample gave a wrong attention kernel and 1-5x either way,
docs/tuning.md). So each top-level block of a kernel gets one fixed, legal schedule:

    reduction block (conv, matmul, pooling, mean, softmax sums, ...):
        spatial loops  ->  [outer tiles, fused, parallel] [reductions] [reg (unrolled)] [vec]
        vec  the innermost spatial axis (contiguous in the output), split by the vector
             width of the target's CPU (8 float32 lanes with AVX2)
        reg  the spatial axis that indexes the fewest inputs (a conv's output channel,
             a matmul's row) split by f, and v vectors of the output (along vec, or along
             the next axis out, a conv's output row, when vec holds one vector): f x v
             accumulators in registers, the tile with most FMAs per load that fits the
             vector registers (4 x 2 with AVX2's 16; _register_tile)
             (cache_write "local" at the tile, written back with the elementwise epilogue
             inlined: bias, relu, ... cost no extra pass over memory)
    spatial block (elementwise, pad, transpose, ...):
        innermost loop vectorised when its extent allows, outer loops fused and parallel;
        a padding whose padded row vectorises narrowly: zeros, then the copy (padding.py)
    a strided conv's padded input (the kernel's own buffer) is written de-interleaved,
        [.., w % s, w // s], so the conv's vector loads along w are contiguous
    a parallel reduction's chunks split its outer loops other than the register axis (a
        conv's rows, not its output channels), and its padded input is computed inside
        each chunk, over the rows that chunk reads: no serial copy before the parallel loop

Loops run in parallel only where the work amortises a thread-pool launch (see
PARALLEL_MIN_MACS for what was measured). Every step is a
TVM schedule primitive, which checks its own legality; a block that refuses one keeps its
loops as they were.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx

from vpuc.compiler import compat
from vpuc.compiler.host.padding import decompose_narrow_padding

# Register tile: f x v accumulators of one vector each (f rows of the register axis, v
# vectors of the output), the v vector loads and the one broadcast they share must fit the
# vector registers: 16 with AVX2, 32 with AVX-512.
VECTOR_REGISTERS = 16
VECTOR_REGISTERS_WIDE = 32  # with 512-bit vectors (AVX-512)
WIDE_VECTOR_LANES = 16  # float32 lanes of a 512-bit register
# Parallel loops from 2^20 MACs: with a pool launch of L = 3.0 us, a loop of serial time T
# gains a third on two threads from T >= 6L = 18 us, about 1M MACs at the default conv
# schedule's 50-57 MACs/ns (resnet_mini's six 1.2-2.4M-MAC convs parallel, each chunk its own
# rows: 1.12-1.26x onnxruntime's two threads idle, against 1.4-1.5x with chunks over output
# channels and 1.6-1.9x serial). A static split stalls at its barrier when another process
# holds a pool thread's core (a model of 71 us took 4.0 ms), so the pool's threads
# follow the load between runs (targets/host_cores.py, PoolFollower): under load one thread
# runs the chunks in turn with the serial loop's code (docs/tuning.md, "threads").
PARALLEL_MIN_MACS = 1 << 20  # a reduction block runs in parallel from this many MACs
PARALLEL_MIN_ELEMENTS = 1 << 22  # a spatial block from this many elements
UNROLL_MAX_STEPS = 16  # pragma_auto_unroll_max_step on scheduled loop nests

DATA_PAR, COMM_REDUCE = 0, 2  # tirx.IterVar kinds
# Intrinsics TVM 0.27's LLVM backend cannot lower once vectorised ("unknown intrinsic
# tirx.sinh"; tests/unit/test_default_schedule.py finds them by trying every float
# intrinsic): a kernel calling one keeps TVM's own (scalar) form.
NO_VECTOR_INTRINSICS = re.compile(r"\bT\.(sinh|cosh)\(")
# What a schedule primitive raises when it refuses (ScheduleError is a RuntimeError).
SCHEDULE_ERRORS = (RuntimeError, ValueError)


@dataclass(frozen=True)
class ScheduleOptions:
    vector_lanes: int  # float32 lanes of the target's widest vector register
    num_cores: int

    @property
    def vector_registers(self) -> int:
        return VECTOR_REGISTERS_WIDE if self.vector_lanes >= WIDE_VECTOR_LANES else VECTOR_REGISTERS

    @property
    def reg_tile_max(self) -> int:
        """Accumulators of a tile along one axis (a GEMV's)."""
        return self.vector_registers // 2


def default_schedule(func: tirx.PrimFunc, options: ScheduleOptions) -> tirx.PrimFunc:
    """`func` with the default schedule applied to each top-level block it accepts."""
    return default_schedule_of(func, options).mod["main"].with_attr("tirx.is_scheduled", True)


def scheduled_or_as_written(kernel: tirx.PrimFunc, options: ScheduleOptions) -> tirx.PrimFunc:
    """The default schedule, or the kernel as TVM wrote it where that schedule fails on it
    (kernels with no root block or an unusual loop nest: CumSum, TopK, Scatter*, found by
    ONNX's node tests; they compiled and passed before default schedules)."""
    try:
        return default_schedule(kernel, options)
    except (RuntimeError, ValueError, IndexError, TypeError):  # TVM schedule errors, the rules
        return kernel


def default_schedule_of(func: tirx.PrimFunc, options: ScheduleOptions) -> s_tir.Schedule:
    """The default schedule of `func` as a TVM Schedule (its trace seeds `vpuc tune`'s search)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    if NO_VECTOR_INTRINSICS.search(func.script()):
        return sch
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    for name in names:
        sch = _deinterleave_strided_reads(sch, name)
    deferred = []  # producers a parallel reduction computes in its chunks (_schedule_reduction)
    for name in names:
        try:
            block = sch.get_sblock(name)
        except SCHEDULE_ERRORS:
            continue  # inlined into an earlier block's write-back
        stmt = sch.get(block)
        if any(str(region.source.dtype) == "bool" for region in [*stmt.reads, *stmt.writes]):
            # vectorised bools break TVM 0.27's LLVM codegen (an invalid `and <6 x i1>`) or,
            # worse, compute wrong values (IsInf in Mod's infinity fix): found by ONNX's node
            # tests (isinf_negative, mod_float_edge_cases_*); such blocks stay as written
            continue
        if _feeds_parallel_reduction(sch, block, options):
            deferred.append(name)
            continue
        kinds = [int(iv.iter_type) for iv in stmt.iter_vars]
        if len(sch.get_loops(block)) != len(kinds):
            continue  # already placed under another block's loops
        trial = sch.copy()
        try:
            if COMM_REDUCE in kinds and DATA_PAR in kinds:
                _schedule_reduction(trial, trial.get_sblock(name), kinds, options)
            elif all(kind == DATA_PAR for kind in kinds):
                _schedule_spatial(trial, trial.get_sblock(name), options)
            else:
                continue  # a full reduction to a scalar (DynamicQuantizeLinear's min/max): TVM's own form
        except SCHEDULE_ERRORS:
            continue
        sch = trial
    for name in deferred:  # those the reduction did not take (its chunks not split): where they are
        block = sch.get_sblock(name)
        if len(sch.get_loops(block)) == len(sch.get(block).iter_vars):
            trial = sch.copy()
            try:
                _schedule_spatial(trial, trial.get_sblock(name), options)
            except SCHEDULE_ERRORS:
                continue
            sch = trial
    return sch


def _feeds_parallel_reduction(sch: s_tir.Schedule, block, options: ScheduleOptions) -> bool:
    """Whether `block` copies one buffer (a conv's padded copy, de-interleaved or not) for a
    single consumer that is a reduction running in parallel: that reduction computes it inside
    each chunk. Anything computed (a dequantised weight) stays at the root, computed once."""
    stmt = sch.get(block)
    if any(int(iv.iter_type) != DATA_PAR for iv in stmt.iter_vars) or not _is_copy(stmt):
        return False
    consumers = sch.get_consumers(block)
    if len(consumers) != 1:
        return False
    kinds = [int(iv.iter_type) for iv in sch.get(consumers[0]).iter_vars]
    if COMM_REDUCE not in kinds or DATA_PAR not in kinds:
        return False
    return _in_parallel(_macs(sch, consumers[0]), options)


def _is_copy(stmt) -> bool:
    """The block stores one buffer's element, or a constant where it pads (if_then_else)."""
    if not isinstance(stmt.body, tirx.BufferStore) or len(stmt.reads) != 1:
        return False
    return compat.loaded_element(stmt.body.value) is not None


def _in_parallel(macs: int, options: ScheduleOptions) -> bool:
    """Whether a reduction of `macs` multiply-adds runs its outer loop in parallel chunks."""
    return macs >= PARALLEL_MIN_MACS and options.num_cores > 1


def _macs(sch: s_tir.Schedule, block) -> int:
    macs = 1
    for loop in sch.get_loops(block):
        macs *= _extent(sch, loop)
    return macs


def _deinterleave_strided_reads(sch: s_tir.Schedule, name: str) -> s_tir.Schedule:
    """A strided conv reads its padded input at stride s along the axis it vectorises
    (pad[.., s*x + r]): s scalar loads per vector. The padded copy is the kernel's own
    buffer, so it is written de-interleaved instead, [.., w % s, w // s] (each phase
    contiguous), and the conv's vector loads are contiguous again."""
    block = sch.get_sblock(name)
    stmt = sch.get(block)
    kinds = [int(iv.iter_type) for iv in stmt.iter_vars]
    live = [iv.var for iv in stmt.iter_vars if int(iv.iter_type) == DATA_PAR and int(iv.dom.extent) > 1]
    if COMM_REDUCE not in kinds or not live:
        return sch
    vec = live[-1]
    for index, region in enumerate(stmt.reads):
        if not region.region:
            continue
        coefficients = tvm.sym.detect_linear_equation(region.region[-1].min, [vec])
        if len(coefficients) != 2 or not isinstance(coefficients[0], tirx.IntImm):
            continue
        stride = int(coefficients[0])
        producers = [
            p for p in sch.get_producers(block) if sch.get(p).writes[0].source.same_as(region.source)
        ]
        if stride < 2 or len(producers) != 1 or int(region.source.shape[-1]) % stride:
            continue

        deinterleave = _deinterleaving(stride, region.source.shape)
        trial = sch.copy()
        try:
            trial.transform_layout(trial.get_sblock(name), ("read", index), deinterleave)
            producer = trial.get_sblock(sch.get(producers[0]).name_hint)
            trial.transform_block_layout(producer, deinterleave)
        except SCHEDULE_ERRORS:
            continue
        return trial
    return sch


def _deinterleaving(stride: int, shape) -> tirx.IndexMap:
    """[.., w] -> [.., w % stride, w // stride], in the buffer's index type"""
    return tirx.IndexMap.from_func(
        lambda *axes: [*axes[:-1], axes[-1] % stride, axes[-1] // stride],
        ndim=len(shape),
        index_dtype=str(shape[-1].ty),
    )


def _extent(sch: s_tir.Schedule, loop) -> int:
    return int(sch.get(loop).extent)


def _largest_divisor(extent: int, limit: int) -> int:
    return max(d for d in range(1, min(extent, limit) + 1) if extent % d == 0)


def _schedule_reduction(sch: s_tir.Schedule, block, kinds: list[int], options: ScheduleOptions) -> None:
    loops = sch.get_loops(block)
    spatial = [i for i, kind in enumerate(kinds) if kind == DATA_PAR]
    reduce = [loops[i] for i, kind in enumerate(kinds) if kind == COMM_REDUCE]
    extents = [_extent(sch, loop) for loop in loops]
    macs = _macs(sch, block)
    live = [i for i in spatial if extents[i] > 1]
    vec_axis = live[-1] if live else None
    reg_axis = _register_axis(sch, block, [i for i in live if i != vec_axis], vec_axis)
    lanes = _largest_divisor(extents[vec_axis], options.vector_lanes) if vec_axis is not None else 1
    row_axis = next((i for i in reversed(live) if i not in (vec_axis, reg_axis)), None)
    tile = _register_tile(extents, vec_axis, lanes, reg_axis, row_axis, options)

    outer, inner_reg, inner_vec = [], [], []
    for i in spatial:
        if i == vec_axis:
            vo, vr, vi = sch.split(loops[i], [None, tile[i], lanes])
            outer.append(vo)
            inner_reg.append(vr)
            inner_vec.append(vi)
        elif i in tile:
            ro, ri = sch.split(loops[i], [None, tile[i]])
            outer.append(ro)
            inner_reg.insert(0, ri)  # rows outside the vectors: the tile's loads run in order
        else:
            outer.append(loops[i])
    if reg_axis is not None and _in_parallel(macs, options):
        # the register axis (a conv's output channels) innermost of the chunked loops: the
        # chunks split the other axes (a conv's rows), so each thread reads (and pads) only
        # the input rows its outputs need, most of them the ones it wrote in the layer before
        register_outer = outer[spatial.index(reg_axis)]
        outer.remove(register_outer)
        outer.append(register_outer)
    sch.reorder(*outer, *reduce, *inner_reg, *inner_vec)
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    chunks = _parallel_chunks(_extent(sch, fused), macs, options)
    if chunks > 1:  # one chunk per core, each a loop of constant extent (see _parallel_chunks)
        chunk, fused = sch.split(fused, [chunks, None])
        _producers_in_chunk(sch, block, chunk, options)

    write_back = sch.cache_write(block, 0, "local")
    _inline_epilogue(sch, write_back)
    sch.reverse_compute_at(write_back, fused, preserve_unit_loops=True)
    for loop in inner_reg:
        sch.unroll(loop)
    for loop in inner_vec:
        sch.vectorize(loop)
    _vectorize_innermost(sch, write_back, options)
    sch.annotate(fused, "pragma_auto_unroll_max_step", UNROLL_MAX_STEPS)
    sch.annotate(fused, "pragma_unroll_explicit", 1)
    if chunks > 1:
        sch.parallel(chunk)
    if reduce:  # last: vectorize and parallel need the block with its init
        init = sch.decompose_reduction(block, reduce[0])
        _vectorize_innermost(sch, init, options)


def _producers_in_chunk(sch: s_tir.Schedule, block, chunk, options: ScheduleOptions) -> None:
    """The reduction's elementwise producers left at the root for it (a conv's padded copy,
    `_feeds_parallel_reduction`) computed inside each parallel chunk, over the part of their
    output the chunk reads (its rows and a halo), in a buffer of the chunk's own."""
    for producer in sch.get_producers(block):
        stmt = sch.get(producer)
        if len(sch.get_loops(producer)) != len(stmt.iter_vars) or len(sch.get_consumers(producer)) != 1:
            continue  # scheduled already, or read by another block too
        if any(int(iv.iter_type) != DATA_PAR for iv in stmt.iter_vars) or not _is_copy(stmt):
            continue
        try:
            sch.compute_at(producer, chunk, preserve_unit_loops=True)
        except SCHEDULE_ERRORS:
            continue  # left at the root, scheduled there (default_schedule_of)
        _schedule_spatial(sch, producer, options, parallel=False)


def _parallel_chunks(extent: int, macs: int, options: ScheduleOptions) -> int:
    """How many parallel chunks a reduction's fused outer loop of `extent` is split into: 1
    (serial) below PARALLEL_MIN_MACS, else the largest divisor of `extent` up to the
    compiler's num-cores. One chunk per thread of the pool, each an inner loop of constant
    extent: on fewer threads (the pool sized to the cores free when the run starts,
    targets/host_cores.py) one thread runs several chunks with the serial loop's code."""
    if not _in_parallel(macs, options):
        return 1
    return _largest_divisor(extent, options.num_cores)


def _register_tile(
    extents: list[int], vec_axis, lanes: int, reg_axis, row_axis, options: ScheduleOptions
) -> dict[int, int]:
    """Per tiled axis, its tile: f along the register axis (each of its rows one broadcast
    load), v vectors along the vector axis, or along the row axis (a conv's output row)
    when the vector axis holds one vector (each one vector load). Each step of the
    reductions then does f*v FMAs for f + v loads, and the tile chosen does most FMAs per
    load with f*v accumulators + v loads + 1 broadcast in the vector registers: 4 x 2 with
    AVX2's 16 (8 x 1 spent 9 loads on 8 FMAs: resnet_mini's 3x3 convs 20-40% slower alone,
    4 x 4 spills), 6 x 4 with AVX-512's 32."""
    if vec_axis is None:
        return {}
    vectors = extents[vec_axis] // lanes
    if reg_axis is None:  # a GEMV: several vectors of its one axis share each load of the other input
        return {vec_axis: _largest_divisor(vectors, options.reg_tile_max)}
    registers = options.vector_registers
    rows = extents[row_axis] if row_axis is not None and vectors == 1 else 1
    best = (0.0, 0, 0, 1, 1, 1)
    for f in _divisors(extents[reg_axis]):
        for v in _divisors(vectors):
            for r in _divisors(rows):
                n = v * r
                if f * n + n + 1 <= registers:
                    best = max(best, (f * n / (f + n), f * n, f, f, v, r))
    _, _, _, f, v, r = best
    tile = {reg_axis: f, vec_axis: v}
    if r > 1:
        tile[row_axis] = r
    return tile


def _divisors(extent: int) -> list[int]:
    return [d for d in range(1, extent + 1) if extent % d == 0]


def _register_axis(sch: s_tir.Schedule, block, candidates: list[int], vec_axis: int | None) -> int | None:
    """The spatial axis that indexes fewest of the inputs the vector axis indexes (ties:
    the innermost): a conv's output channel, a matmul's row. Its register tile reuses each
    vector load of those inputs."""
    if not candidates:
        return None
    stmt = sch.get(block)
    names = [iv.var.name for iv in stmt.iter_vars]
    vec_name = names[vec_axis] if vec_axis is not None else None
    shared = {i: 0 for i in candidates}
    for region in stmt.reads:
        used = set()
        for rng in region.region:
            used |= {v.name for v in tirx.analysis.undefined_vars(rng.min)}
        if vec_name is None or vec_name in used:
            for i in candidates:
                shared[i] += names[i] in used
    return min(reversed(candidates), key=lambda i: shared[i])


def _inline_epilogue(sch: s_tir.Schedule, write_back) -> None:
    """Fold elementwise consumers (bias add, relu, ...) into the tile's write-back."""
    while True:
        consumers = sch.get_consumers(write_back)
        if len(consumers) != 1:
            return
        consumer = consumers[0]
        if any(int(iv.iter_type) != DATA_PAR for iv in sch.get(consumer).iter_vars):
            return
        try:
            sch.reverse_compute_inline(consumer)
        except SCHEDULE_ERRORS:
            return


def _vectorize_innermost(sch: s_tir.Schedule, block, options: ScheduleOptions) -> None:
    loops = sch.get_loops(block)
    if not loops:
        return
    extent = _extent(sch, loops[-1])
    factor = _largest_divisor(extent, options.vector_lanes)
    if factor > 1:
        if factor < extent:
            _, inner = sch.split(loops[-1], [None, factor])
            sch.vectorize(inner)
        else:
            sch.vectorize(loops[-1])


def _schedule_spatial(sch: s_tir.Schedule, block, options: ScheduleOptions, parallel: bool = True) -> None:
    """Vectorise the block's innermost loop (a padding's in-bound copy's: padding.py)
    and, from PARALLEL_MIN_ELEMENTS, run its outer loops in parallel. `block`'s own loops are
    the innermost len(iter_vars) (it may sit under a reduction's chunk)."""
    own = len(sch.get(block).iter_vars)
    elements = 1
    for loop in sch.get_loops(block)[-own:]:
        elements *= _extent(sch, loop)
    decompose_narrow_padding(sch, block, options.vector_lanes)
    _vectorize_innermost(sch, block, options)
    loops = sch.get_loops(block)
    vector = sch.get(loops[-1]).kind == tirx.ForKind.VECTORIZED
    outer = loops[:-1] if vector else loops
    if parallel and elements >= PARALLEL_MIN_ELEMENTS and options.num_cores > 1 and len(outer) >= 1:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.parallel(fused)
