"""Shared helpers for the benchmarks: timing by median of repeats, and the JSON writer.

Benchmarks print ratios measured in one run against a peer (these machines are noisy, so
absolute times are reported for context only) and write bench/out/<name>.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "out"
WIDE = 240  # columns when stdout is a pipe or a file: rich's default there is 80, which cut figures


def console(**options):
    """A rich Console for a bench's tables: the terminal's width on a terminal, else WIDE, so
    `bench/x.py | tee log` keeps every figure (rich cuts cells to fit, as `0.0…`)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else WIDE, **options)


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def write_json(name: str, figures: dict) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"{name}.json"
    path.write_text(json.dumps(figures, indent=2, sort_keys=True))
    return path
