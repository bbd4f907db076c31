"""ONNX's backend node tests in CI (the whole run is tests/onnx_node/run_node_tests.py
--check, about 10 minutes on 2 cores; docs/reliability.md).

Here: the pass list is sound and big enough, and a deterministic sample of it still passes,
compiled as `vpuc compile` does and run from memory: the first case of every op in it, and
every case that once gave a wrong answer: each case whose model frontend/fixes rewrites (the
ops TVM converted wrongly) and each case with a 0-d input (`vpuc run` made them (1,))."""

from __future__ import annotations

import onnx
import pytest
from node_harness import PASS_LIST, collect_cases, read_disputed, read_pass_list, run_case_in_process

from vpuc.compiler.frontend.fixes import fix_ops

PASSING = read_pass_list()
FIXED_OPS = {"ConvInteger"}  # fixed outside frontend/fixes (frontend/integer_ops.py)


def _once_wrong(model: onnx.ModelProto) -> bool:
    if any(len(vi.type.tensor_type.shape.dim) == 0 for vi in model.graph.input):
        return True
    if any(node.op_type in FIXED_OPS for node in model.graph.node):
        return True
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        return bool(fix_ops(inferred)[1])
    except Exception:  # shape inference fails on some cases: the sample simply skips them
        return False


@pytest.fixture(scope="module")
def cases():
    return {case.name: case for case in collect_cases() if case.name in PASSING}


def _sample(cases) -> list[str]:
    first_of_op: dict[str, str] = {}
    for name, op in sorted(PASSING.items()):
        if op not in ("expanded", "multi-node"):
            first_of_op.setdefault(op, name)
    once_wrong = {name for name, case in cases.items() if _once_wrong(onnx.load_from_string(case.model))}
    return sorted(set(first_of_op.values()) | once_wrong)


def test_pass_list_is_sound(cases):
    assert len(PASSING) >= 1100, f"{PASS_LIST} lists {len(PASSING)} cases"
    missing = set(PASSING) - set(cases)
    assert not missing, f"cases onnx no longer generates: {sorted(missing)[:5]}"
    assert not set(read_disputed()) & set(PASSING), "a disputed case is in the pass list"


def test_sample_still_passes(cases):
    sample = _sample(cases)
    assert len(sample) >= 150, len(sample)
    failed = []
    for name in sample:
        result = run_case_in_process(cases[name])
        if result.outcome != "pass":
            failed.append(f"{name}: {result.outcome}: {result.detail[:200]}")
    assert not failed, f"{len(failed)} of {len(sample)} sampled passes lost:\n" + "\n".join(failed)
