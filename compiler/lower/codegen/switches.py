"""The code generator's switches: module constants whose value changes the program it emits.
The lowering memo (compiler/lower/memo.py) and the planner's cached answers (oracle.py) are
keyed by their values at call time, so a patched switch (a test, a sweep) lowers again.

    SWITCHES      (module, name) of each switch
    switches()    their current values
"""

from __future__ import annotations

from vpuc.compiler.lower.codegen import (
    cascade,
    emit,
    mac_bound,
    mac_shape,
    prefetch,
    residency,
    tile_im2col,
    tile_mac,
    tiling,
)

# (module, name): module constants whose value changes the program the code generator emits
SWITCHES = (
    (cascade, "CASCADE"),  # layers cascaded onto the layer before where the estimate gains
    (cascade, "SHIFT_STEPS"),  # how far short of the largest shift the search tries too
    (emit, "ATTEMPTS"),  # the SRAM budget factors tried in turn
    (prefetch, "PREFETCH_DEPTH"),
    (prefetch, "PREFETCH_KEY"),
    (prefetch, "LATE_KEY"),
    (prefetch, "PIECES"),  # into how many transfers a load hoisted early may be cut
    (prefetch, "PREFETCH_ROLES"),
    (residency, "ALIGN"),
    (tile_im2col, "CHOOSE"),  # im2col or conv: by the estimate, or forced (tests)
    (tile_mac, "TRAFFIC_SLACK"),
    (mac_shape, "VECTOR_SPLITS"),
    (mac_shape, "STREAM_SPLITS"),  # weights streamed in input-channel steps and lead chunks
    (mac_bound, "RANK_HIDDEN"),  # a first weight load an earlier layer hides left out of the ranking
    (tiling, "STORE_KEY"),
)


def switches() -> tuple:
    """The current value of each switch, read at call time (a patched switch counts)."""
    return tuple((module.__name__, name, getattr(module, name)) for module, name in SWITCHES)
