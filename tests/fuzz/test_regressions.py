"""Every failure the fuzzer ever found, replayed: tests/fuzz_regressions/<target>-<hash>.onnx
with its inputs (.npz) and what it was (.json: target, kind, the problem, the first bad pass).
A case stays here after its fix, so the bug cannot come back. A case marked `refused_before`
was a refusal vpuc should not have made (a clean answer to the fuzzer, a wrong one to a
user): it must now compile."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from fuzz_check import REGRESSIONS, VPU_CHOICES, run_check

from vpuc.compiler import compile_model

CASES = sorted(REGRESSIONS.glob("*.json"))


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_fuzz_regression(case):
    meta = json.loads(case.read_text())
    model = onnx.load(case.with_suffix(".onnx"))
    with np.load(case.with_suffix(".npz")) as data:
        inputs = {name: data[name] for name in data.files}
    if meta.get("refused_before"):
        compile_model(model, target=meta["target"], **VPU_CHOICES)  # no CompileError
    assert run_check(model, meta["target"], inputs, meta["kind"]) is None


def test_regression_cases_are_complete():
    for case in CASES:
        meta = json.loads(case.read_text())
        assert {"target", "kind", "problem", "first_bad_pass"} <= set(meta), case
        assert case.with_suffix(".onnx").exists() and case.with_suffix(".npz").exists(), case
