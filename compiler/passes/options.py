"""What the graph passes are told beyond the module: the target's kind and the user's knobs.

One frozen object, built by the pipeline from the Target and the compile options, is given
to every pass (Vela keeps hardware and compiler options apart the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

CPU_LAYOUTS = ("auto", "NCHW", "NHWC")


@dataclass(frozen=True)
class PassOptions:
    """Knobs of the graph passes.

    target_kind        "cpu" or "vpu": the layout pass converts convs to NHWC for "vpu"
    fold_max_growth    a folded constant may hold at most this many times the elements of
                       its constant inputs ...
    fold_free_elements ... or this many elements, whichever is larger
    cpu_layout         "auto": NHWC only where it removes transposes (docs/passes.md says
                       why); "NCHW" or "NHWC" to force one
    """

    target_kind: str = "cpu"
    fold_max_growth: float = 4.0
    fold_free_elements: int = 64
    cpu_layout: str = "auto"

    def __post_init__(self) -> None:
        if self.cpu_layout not in CPU_LAYOUTS:
            raise ValueError(f"cpu_layout must be one of {', '.join(CPU_LAYOUTS)}, not {self.cpu_layout!r}")
        if self.fold_max_growth < 1.0:
            raise ValueError(f"fold_max_growth must be >= 1, not {self.fold_max_growth}")
