"""ONNX's backend node tests in CI (the whole run is tests/onnx_node/run_node_tests.py
--check, about 20 minutes; docs/reliability.md).

Here: the pass list is sound and big enough, and a deterministic sample of it still passes:
the first case of every op in it, and every case that once gave a wrong answer or crashed
(fixed_cases.txt), compiled as `vpuc compile` does and run from memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from node_harness import PASS_LIST, collect_cases, read_pass_list, run_case_in_process

FIXED = Path(__file__).resolve().parent / "fixed_cases.txt"
PASSING = read_pass_list()


def _sample() -> list[str]:
    first_of_op: dict[str, str] = {}
    for name, op in sorted(PASSING.items()):
        if op not in ("expanded", "multi-node"):
            first_of_op.setdefault(op, name)
    fixed = [line.split()[0] for line in FIXED.read_text().splitlines() if line.strip() and line[0] != "#"]
    return sorted(set(first_of_op.values()) | {n for n in fixed if n in PASSING})


SAMPLE = _sample()


@pytest.fixture(scope="module")
def cases():
    names = set(SAMPLE)
    return {case.name: case for case in collect_cases() if case.name in names or case.name in PASSING}


def test_pass_list_is_sound(cases):
    assert len(PASSING) >= 1100, f"{PASS_LIST} lists {len(PASSING)} cases"
    missing = set(PASSING) - set(cases)
    assert not missing, f"cases onnx no longer generates: {sorted(missing)[:5]}"
    fixed = [line.split()[0] for line in FIXED.read_text().splitlines() if line.strip() and line[0] != "#"]
    assert set(fixed) <= set(PASSING), "a fixed case is no longer in the pass list"


@pytest.mark.parametrize("name", SAMPLE)
def test_still_passes(cases, name):
    result = run_case_in_process(cases[name])
    assert result.outcome == "pass", f"{name}: {result.outcome}: {result.detail}"
