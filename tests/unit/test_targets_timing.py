"""Target files whose timing figures contradict each other are refused with one line that
names the key: a zero bandwidth, a vector rate above the lanes, weights placed in a flash
the target does not have, an unknown region, a negative pipeline fill, an unknown issue
order or softmax home; and a target's JSON form round-trips."""

from __future__ import annotations

import pytest

from vpuc.targets import TargetError, load_target
from vpuc.targets.loader import target_from_json


def _target(tmp_path, hardware: str):
    path = tmp_path / "t.toml"
    path.write_text(f'[target]\nname = "t"\ninherit = "vpu"\n\n[hardware]\n{hardware}\n')
    return load_target(path)


@pytest.mark.parametrize(
    ("hardware", "message"),
    [
        ("sram_bytes_per_cycle = 0", r"t.toml: hardware.sram_bytes_per_cycle: 0 is out of range"),
        (
            "vector_add_per_cycle = 0",
            r"t.toml: hardware.vector_add_per_cycle: must be elements per cycle > 0",
        ),
        (
            "vector_pool_per_cycle = 64",
            r"t.toml: hardware.vector_pool_per_cycle: 64 elements per cycle is more",
        ),
        ('weights_in = "flash"', r"t.toml: hardware.weights_in: weights are placed in flash but the target"),
        ('weights_in = "tape"', r"t.toml: hardware.weights_in: 'tape' is not one of dram, flash"),
        ('feature_maps_in = "flash"', r"t.toml: hardware.feature_maps_in: 'flash' is not one of sram, dram"),
        ("mac_grouped_pixels_per_cycle = 17", r"t.toml: hardware.mac_grouped_pixels_per_cycle: 17 pixels"),
        ("flash_bytes_per_cycle = 0", r"t.toml: hardware.flash_bytes_per_cycle: 0 is out of range"),
        ("dram_outstanding = 0", r"t.toml: hardware.dram_outstanding: 0 is out of range"),
        ("flash_outstanding = 2", r"t.toml: hardware.flash_outstanding: transfers in flight on a flash port"),
        ("mac_fill_cycles = -1", r"t.toml: hardware.mac_fill_cycles: -1 is out of range"),
        ('mac_fill_cycles = "2"', r"t.toml: hardware.mac_fill_cycles: must be an integer"),
        (
            'issue_order = "during"',
            r"t.toml: hardware.issue_order: 'during' is not one of after_wait, before_wait",
        ),
        (
            'mac_load_order = "early"',
            r"t.toml: hardware.mac_load_order: 'early' is not one of after_wait, before_wait",
        ),
        (
            'softmax_passes_in = "flash"',
            r"t.toml: hardware.softmax_passes_in: 'flash' is not one of sram, dram",
        ),
        ("softmax_passes_in = 1", r"t.toml: hardware.softmax_passes_in: must be a string"),
        ("mac_row_slice = 5", r"t.toml: hardware.mac_row_slice: 5 channels a slice does not divide"),
        ("mac_row_slice = -1", r"t.toml: hardware.mac_row_slice: -1 is out of range"),
    ],
)
def test_contradictory_figures_name_the_key(tmp_path, hardware, message):
    with pytest.raises(TargetError, match=message):
        _target(tmp_path, hardware)


def test_a_flash_target_loads(tmp_path):
    hw = _target(
        tmp_path, 'weights_in = "flash"\nflash_bytes_per_cycle = 2\nflash_latency_cycles = 10\n'
    ).hardware
    assert (hw.flash_bytes_per_cycle, hw.flash_latency_cycles, hw.flash_burst_bytes) == (2, 10, 0)


@pytest.mark.parametrize("name", ["vpu", "vpu-plus", "u55-256", "u55-256-sram"])
def test_the_json_form_round_trips(name):
    target = load_target(name)
    again = target_from_json(target.to_json(), "manifest.json")
    assert again.hardware == target.hardware
