"""The quantiser's methods beyond range calibration, as one options object.

    QuantOptions  ->  quantize(..., options=)  /  quantize_for_compile(..., options=)

Each method is a named calibration option (docs/quantization.md describes every one and
the figures that decided its default):

    equalize        cross-layer equalisation of conv/dense -> relu -> conv/dense chains
                    (equalize.py), before calibration
    absorb_bias     bias absorption across such chains (absorb_bias.py)
    smoothquant     SmoothQuant migration of activation outliers into dense weights, with
                    strength `smoothquant_alpha` (None: chosen per tensor) (smoothquant.py)
    adaround        adaptive rounding of conv/dense weights (adaround.py), within
                    `adaround_budget_s` seconds of compile time
    keep_float      ONNX node names whose layer stays in float on the CPU
    min_sqnr_db     the accuracy floor: keep the most sensitive layers in float until the
                    output SQNR on the held-out samples reaches it (floor.py); None: off
    accept_below_floor   write the artifact even when the floor cannot be reached
    sensitivity     report every quantised layer's SQNR when it alone is int8; None (the
                    default): when it costs at most SENSITIVITY_AUTO_MACS (measure.py)
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MIN_SQNR_DB = 25.0
DEFAULT_ADAROUND_BUDGET_S = 1.0


@dataclass(frozen=True)
class QuantOptions:
    equalize: bool = False
    absorb_bias: bool = False
    smoothquant: bool = True
    smoothquant_alpha: float | None = None  # None: chosen per tensor (smoothquant.choose_alphas)
    adaround: bool = False
    adaround_budget_s: float = DEFAULT_ADAROUND_BUDGET_S
    keep_float: tuple[str, ...] = ()
    min_sqnr_db: float | None = DEFAULT_MIN_SQNR_DB
    accept_below_floor: bool = False
    sensitivity: bool | None = None  # None: measured where it is cheap (measure.sensitivity_wanted)

    def methods(self) -> dict:
        """The report's record of what ran."""
        return {
            "equalize": self.equalize,
            "absorb_bias": self.absorb_bias,
            "smoothquant": (self.smoothquant_alpha or "auto") if self.smoothquant else None,
            "adaround": self.adaround_budget_s if self.adaround else None,
            "keep_float": list(self.keep_float),
            "min_sqnr_db": self.min_sqnr_db,
            "accept_below_floor": self.accept_below_floor,
        }
