"""Area and energy proxies of a sweep point (docs/sweep.md defines them and cites the figures).

Not a layout nor a power simulation: first-order sums of published 45 nm figures, so that
points can be ranked against each other. Every constant below is a published figure or an
assumption named as one.

    area_mm2   = (macs_per_cycle + vector_lanes) * MAC_AREA_UM2 + sram_bytes * SRAM_AREA_UM2_PER_BYTE
    energy_uj  = macs * MAC_ENERGY_PJ
               + (dram_read_bytes + dram_write_bytes + host_link_bytes) * DRAM_ENERGY_PJ_PER_BYTE
               + sram_accessed_bytes * sram_energy_pj_per_byte(sram_bytes)
"""

from __future__ import annotations

import math

# Horowitz, "Computing's energy problem", ISSCC 2014 (45 nm, 0.9 V): an 8-bit multiply
# 0.2 pJ and 282 um^2, a 32-bit add 0.1 pJ and 137 um^2. One int8 MAC = both (int32 sum).
MAC_ENERGY_PJ = 0.2 + 0.1
MAC_AREA_UM2 = 282 + 137
# Horowitz 2014: a 64-bit read of an 8 KB SRAM 10 pJ, of 32 KB 20 pJ, of 1 MB 100 pJ;
# per byte, interpolated on log(size) between those points (and extended past them).
SRAM_READ_PJ_PER_8_BYTES = ((8 << 10, 10.0), (32 << 10, 20.0), (1 << 20, 100.0))
# Horowitz 2014: a 64-bit DRAM access 1.3-2.6 nJ; the midpoint, per byte.
DRAM_ENERGY_PJ_PER_BYTE = (1300 + 2600) / 2 / 8
# Mistry et al., IEDM 2007 (Intel 45 nm): a 0.346 um^2 6T SRAM cell. Array efficiency
# (cells / macro area, the decoders and sense amplifiers being the rest) 70%: an assumption.
SRAM_CELL_UM2 = 0.346
SRAM_ARRAY_EFFICIENCY = 0.70
SRAM_AREA_UM2_PER_BYTE = 8 * SRAM_CELL_UM2 / SRAM_ARRAY_EFFICIENCY


def sram_energy_pj_per_byte(sram_bytes: int) -> float:
    """Energy of one SRAM byte accessed, for a scratchpad of `sram_bytes` (log-log interpolation)."""
    points = [(math.log(size), math.log(pj / 8)) for size, pj in SRAM_READ_PJ_PER_8_BYTES]
    x = math.log(sram_bytes)
    (x0, y0), (x1, y1) = points[:2] if x < points[1][0] else points[1:]
    return math.exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0))


def area_mm2(hardware) -> float:
    """The area proxy of a VPU's MAC array, vector lanes and SRAM, in mm^2."""
    macs = hardware.mac_rows * hardware.mac_cols + hardware.vector_lanes
    return (macs * MAC_AREA_UM2 + hardware.sram_bytes * SRAM_AREA_UM2_PER_BYTE) / 1e6


def energy_uj(hardware, figures: dict) -> float:
    """The energy proxy of one inference, in uJ, from the point's counted figures."""
    off_chip = figures["dram_read_bytes"] + figures["dram_write_bytes"] + figures["host_link_bytes"]
    picojoules = (
        figures["macs"] * MAC_ENERGY_PJ
        + off_chip * DRAM_ENERGY_PJ_PER_BYTE
        + figures["sram_accessed_bytes"] * sram_energy_pj_per_byte(hardware.sram_bytes)
    )
    return picojoules / 1e6
