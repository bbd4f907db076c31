"""The parts of `vpuc sweep` with figures a hand calculation gives: the Pareto front, the
area and energy proxies (docs/sweep.md), the Latin hypercube, and a point's target."""

from __future__ import annotations

import math

import pytest

from vpuc.compiler.sweep import pareto, proxies, space
from vpuc.targets import load_target


def test_pareto_front_by_hand():
    points = [
        {"latency_us": 10, "area_mm2": 1, "energy_uj": 5},  # fastest of the small ones: on it
        {"latency_us": 12, "area_mm2": 1, "energy_uj": 5},  # beaten by the first
        {"latency_us": 5, "area_mm2": 4, "energy_uj": 5},  # fastest: on it
        {"latency_us": 10, "area_mm2": 1, "energy_uj": 3},  # beats the first on energy
        {"latency_us": 5, "area_mm2": 4, "energy_uj": 5},  # a tie with the third: both stay
    ]
    assert pareto.front(points) == [2, 3, 4]


def test_sram_energy_at_horowitz_points():
    # 64-bit reads: 8 KB 10 pJ, 32 KB 20 pJ, 1 MB 100 pJ -> per byte /8
    assert proxies.sram_energy_pj_per_byte(8 << 10) == pytest.approx(1.25)
    assert proxies.sram_energy_pj_per_byte(32 << 10) == pytest.approx(2.5)
    assert proxies.sram_energy_pj_per_byte(1 << 20) == pytest.approx(12.5)
    assert proxies.sram_energy_pj_per_byte(16 << 10) == pytest.approx(math.sqrt(1.25 * 2.5))


def test_area_of_the_vpu_target_by_hand():
    hw = load_target("vpu").hardware  # 16x16 MACs, 32 lanes, 512 KiB
    macs_um2 = (256 + 32) * (282 + 137)
    sram_um2 = 524288 * 8 * 0.346 / 0.70
    assert proxies.area_mm2(hw) == pytest.approx((macs_um2 + sram_um2) / 1e6)


def test_latin_hypercube_covers_every_value_once():
    params = [space.parse_param("mac_rows=4,8,16,32"), space.parse_param("sram_bytes=16K,32K,64K,128K")]
    chosen = space.points(params, samples=4, latin=True, seed=7)
    assert sorted(p["mac_rows"] for p in chosen) == [4, 8, 16, 32]
    assert sorted(p["sram_bytes"] for p in chosen) == [16384, 32768, 65536, 131072]


def test_a_point_derives_what_its_base_derived():
    base = load_target("vpu")  # mac_weight_load_cycles = 16 = mac_rows: the derived value
    target = space.point_target(base, {"mac_rows": 32, "ops.relu": False})
    assert target.hardware.mac_weight_load_cycles == 32
    assert target.hardware.dram_burst_bytes == 32  # 32 != dram_bytes_per_cycle: given, kept
    assert not target.supports("relu") and target.supports("conv2d")
