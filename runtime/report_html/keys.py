"""The JSON keys the HTML report reads from report.json and a run JSON, in one place: when
a report renames a key (mac_utilisation -> mac_utilization), one line here follows it."""

from __future__ import annotations

from typing import Any

KEYS = {
    "mac_utilization": "mac_utilization",
    "estimate_cycles": "estimate_cycles",
    "dram_read_bytes": "dram_read_bytes",
    "dram_write_bytes": "dram_write_bytes",
    "weight_bytes": "weight_bytes",
    "sram_peak_bytes": "sram_peak_bytes",
    "sqnr_db": "sqnr_db",
}


def get(entry: dict[str, Any], name: str, default: Any = None) -> Any:
    """entry's value for the report's key `name` (KEYS maps it to the JSON's spelling)."""
    return entry.get(KEYS.get(name, name), default)
