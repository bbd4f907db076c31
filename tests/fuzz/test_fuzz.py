"""Differential fuzzing: random valid ONNX graphs, compiled by vpuc and compared with
onnxruntime (tests/fuzz/fuzz_check.py has the property and the tolerances).

    cpu        float graphs (fuzz_graphs.float_graphs) against onnxruntime's float answer
    vpu, vpu-plus, u55-256   the same graphs quantised by onnxruntime's quantize_static (QDQ), against
               onnxruntime on that QDQ model, within 1 LSB of each output's quantisation;
               and (vpu, vpu-plus) in its QOperator format, against its integer kernels,
               and with some tensors kept at 16 bits (mixed precision), against the QDQ model

CI runs a bounded, derandomised number of examples; many more, with fresh randomness:

    VPUC_FUZZ_EXAMPLES=500 .venv/bin/python -m pytest tests/fuzz -q

(docs/reliability.md). A failure is shrunk by hypothesis, bisected over the graph passes and
saved under tests/fuzz_regressions/, which tests/fuzz/test_regressions.py replays.
"""

from __future__ import annotations

import os

import pytest
from fuzz_check import check_example
from fuzz_exports import export_graphs
from fuzz_graphs import float_graphs, random_inputs
from fuzz_qdq import mixed_precision_graphs, qdq_graphs, qoperator_graphs
from hypothesis import HealthCheck, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase as ExampleDatabase

LONG = "VPUC_FUZZ_EXAMPLES" in os.environ
CI_EXAMPLES = {"cpu": 25, "vpu": 12, "vpu-plus": 12, "u55-256": 6}
CI_EXPORT_EXAMPLES = 4  # per target: the exports' forms (fuzz_exports.py)
CI_QOPERATOR_EXAMPLES = 4  # per target: onnxruntime's QOperator format
CI_MIXED_EXAMPLES = 4  # per target: int8 models with some tensors at 16 bits


def _settings(target: str, ci_examples: int | None = None, database: str = "fuzz"):
    examples = int(os.environ.get("VPUC_FUZZ_EXAMPLES", ci_examples or CI_EXAMPLES[target]))
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=not LONG,  # CI: the same examples every run; long runs explore
        # one example database per target: vpu and vpu-plus share the inner function below,
        # so with hypothesis's default key vpu-plus replayed vpu's failure and stopped there
        database=ExampleDatabase(f".hypothesis/{database}-{target}") if LONG else None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        print_blob=True,
    )


@_settings("cpu")
@given(float_graphs())
def test_cpu_matches_onnxruntime(graph):
    model, seed = graph
    check_example(model, "cpu", random_inputs(model, seed), "float", "test_cpu_matches_onnxruntime")


@pytest.mark.parametrize("target", ["vpu", "vpu-plus", "u55-256"])
def test_vpu_matches_qdq_reference(target):
    @_settings(target)
    @given(qdq_graphs())
    def run(graph):
        model, seed = graph
        check_example(
            model, target, random_inputs(model, seed), "qdq", f"test_vpu_matches_qdq_reference-{target}"
        )

    run()


@pytest.mark.parametrize("target", ["vpu", "vpu-plus", "u55-256"])
def test_export_forms_match_qdq_reference(target):
    """The forms real exports have (fuzz_exports.py: kernels and padding past the limits,
    large and global pools, views between layers, softmax heads), quantised the same way."""

    @_settings(target, CI_EXPORT_EXAMPLES, database="exports")
    @given(qdq_graphs(export_graphs()))
    def run(graph):
        model, seed = graph
        check_example(
            model,
            target,
            random_inputs(model, seed),
            "qdq",
            f"test_export_forms_match_qdq_reference-{target}",
        )

    run()


@pytest.mark.parametrize("target", ["vpu", "vpu-plus"])
def test_qoperator_forms_match_onnxruntime_kernels(target):
    """The same graphs quantised in onnxruntime's QOperator format (frontend/qoperator.py reads
    them as QDQ), against onnxruntime's integer kernels on the QOperator model."""

    @_settings(target, CI_QOPERATOR_EXAMPLES, database="qoperator")
    @given(qoperator_graphs())
    def run(graph):
        model, seed = graph
        check_example(
            model,
            target,
            random_inputs(model, seed),
            "qdq",
            f"test_qoperator_forms_match_onnxruntime_kernels-{target}",
        )

    run()


@pytest.mark.parametrize("target", ["vpu", "vpu-plus"])
def test_mixed_precision_forms_match_qdq_reference(target):
    """The same graphs quantised to int8 with one to three tensors kept at 16 bits
    (onnxruntime's TensorQuantOverrides): the layers of a 16-bit tensor run on the host, the
    rest on the VPU, against onnxruntime on the QDQ model."""

    @_settings(target, CI_MIXED_EXAMPLES, database="mixed")
    @given(mixed_precision_graphs())
    def run(graph):
        model, seed = graph
        check_example(
            model,
            target,
            random_inputs(model, seed),
            "qdq",
            f"test_mixed_precision_forms_match_qdq_reference-{target}",
        )

    run()
