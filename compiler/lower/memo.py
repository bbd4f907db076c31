"""The lowering memo: a VPU subgraph's program within one process, so that the programs of a
repeated compile (the regression runner, the sweep, a script calling compile_model) and the
partitioner's estimate of a subgraph the final cut keeps are lowered once.

    lower(subgraph, target) -> VpuProgram      as emit.lower_subgraph, memoised

The key is everything `lower_subgraph` reads: the subgraph's content (every op, tensor,
constant and name, the weights' bytes; reader/extract.py made it from the Relax function,
so the Relax side needs no key of its own), the target's figures, and the value of every
module-level switch of the code generator that changes what it emits (SWITCHES). A module
constant of compiler/lower/codegen/ is either a switch or a fixed fact of the ISA or of a
name (FIXED); tests/lower/test_lowering_memo.py fails on one that is neither, so a new
switch joins the key. A failure (LowerError) is remembered too. Each caller gets its own
copy of the program (its instructions, immutable, are shared): mark_edge and
lower_partitioned write into theirs.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import struct

import numpy as np

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import emit, oracle
from vpuc.compiler.lower.codegen.emit import VpuProgram
from vpuc.compiler.lower.codegen.switches import SWITCHES, switches  # noqa: F401 (memo.SWITCHES)
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets import Target

# module constants of compiler/lower/codegen/ that are facts, not choices: ISA field limits,
# unit names, the planner's placeholder op parts, the memos themselves, and the search's
# fast-path switches (the same programs on or off: tests/lower/test_search_fast_path.py)
FIXED = {
    "checkpoints": ("NEVER",),
    "estimate": ("QUEUES",),
    "mac_bound": ("_LARGEST",),
    "switches": ("SWITCHES",),
    "oracle": ("UNIT", "LUT_KINDS", "_ANSWERS", "_FINGERPRINTS"),
    "plan": ("BLOB_PREFIX",),
    "sync": ("QUEUED",),
    "im2col_gather": ("BAND_MEMO",),
    "tile_im2col": ("PRUNE",),
    "tile_mac": ("VECTOR_PART", "_CHOSEN", "_BOUNDED"),
    "tile_vector": ("MAX_WINDOW",),
    "tiling": ("UNIT_OF_OPCODE", "_CYCLES", "_CYCLES_MAX", "_DEFAULTS", "KEEP_FIXED"),
    "transfer": ("MAX_ROWS", "MAX_ROW_BYTES"),
}

# key -> (the program or the failure, the symbol and index it was lowered under)
_LOWERED: dict[bytes, tuple[VpuProgram | LowerError, str, int]] = {}
_MAX_ENTRIES = 256  # emptied when full, or when the weight blobs held pass _MAX_BLOB_BYTES
_MAX_BLOB_BYTES = 256 << 20
# Whether the key leaves out the subgraph's symbol and index (emit.lower_subgraph reads them
# only to label the program: VpuProgram.symbol and .index, Program.source, its failures'
# messages), so that a subgraph the final cut numbers otherwise than the raw cut takes the
# raw cut's program under its own labels (YOLOv8n-320: 47 of its 60); off, it lowers again.
UNLABELLED_KEY = True


def lower(subgraph: vops.Subgraph, target: Target) -> VpuProgram:
    """emit.lower_subgraph(subgraph, target), once per content, target and switches."""
    key = memo_key(_unlabelled(subgraph) if UNLABELLED_KEY else subgraph, target)
    found = _LOWERED.get(key)
    labels = (subgraph.symbol, subgraph.index)
    if found is not None and isinstance(found[0], LowerError) and found[1:] != labels:
        found = None  # a failure's message names the subgraph: lowered again under this name
    if found is None:
        try:
            result = emit.lower_subgraph(subgraph, target)
        except LowerError as exc:
            result = exc
        held = sum(len(p.blob) for p, _, _ in _LOWERED.values() if isinstance(p, VpuProgram))
        if len(_LOWERED) >= _MAX_ENTRIES or held > _MAX_BLOB_BYTES:
            _LOWERED.clear()
        found = _LOWERED[key] = (result, subgraph.symbol, subgraph.index)
    result = found[0]
    if isinstance(result, LowerError):
        raise copy.copy(result).with_traceback(None)
    program = copy.deepcopy(result, {id(result.program): result.program})
    if found[1:] != (subgraph.symbol, subgraph.index):  # the labels lower_subgraph gives it
        program.symbol, program.index = subgraph.symbol, subgraph.index
        program.program = dataclasses.replace(result.program, source=subgraph.symbol)
    return program


def _unlabelled(subgraph: vops.Subgraph) -> vops.Subgraph:
    return dataclasses.replace(subgraph, symbol="", index=0)


def memo_key(subgraph: vops.Subgraph, target: Target) -> bytes:
    """The digest of what lowering `subgraph` for `target` reads."""
    digest = hashlib.sha256()
    _feed(digest, subgraph)
    _feed(digest, oracle.target_fingerprint(target))
    _feed(digest, switches())
    return digest.digest()


def _feed(digest, value) -> None:
    """Feed a canonical, typed encoding of `value` (dataclasses, containers, arrays, scalars)."""
    if value is None or isinstance(value, bool | int | str | bytes):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, float):
        digest.update(b"f" + struct.pack("<d", value))
    elif isinstance(value, np.ndarray):
        digest.update(f"nd:{value.dtype.str}:{value.shape};".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, np.generic):
        _feed(digest, value.item())
    elif isinstance(value, list | tuple | frozenset | set):
        items = sorted(value, key=repr) if isinstance(value, frozenset | set) else value
        digest.update(f"{type(value).__name__}[{len(items)}:".encode())
        for item in items:
            _feed(digest, item)
        digest.update(b"]")
    elif isinstance(value, dict):
        digest.update(f"dict[{len(value)}:".encode())
        for k, v in value.items():
            _feed(digest, k)
            _feed(digest, v)
        digest.update(b"]")
    elif dataclasses.is_dataclass(value):
        digest.update(f"{type(value).__module__}.{type(value).__qualname__}(".encode())
        _feed(digest, vars(value) if hasattr(value, "__dict__") else dataclasses.asdict(value))
        digest.update(b")")
    else:
        raise TypeError(f"lowering memo: no key for a {type(value).__name__} ({value!r:.60})")
