"""annotate leaves out the pattern rows that cannot match the module (an op each of them
needs is not called in it): FuseOpsByPattern's cost is per row and binding. The ops a row
needs are read off its pattern; a row left out wrongly would change the partition, so the
annotation is compared with the whole table's on float and QDQ modules."""

from __future__ import annotations

import importlib

import pytest

from vpuc.compiler import compat
from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.partition import patterns
from vpuc.compiler.partition.patterns import may_match, needed_ops, pattern_table

annotate_module = importlib.import_module("vpuc.compiler.partition.annotate")


def _needs(name: str) -> list[set[str]]:
    (row,) = [r for r in pattern_table((2,)) if r.name == name]
    return [{op.removeprefix("relax.") for op in needed} for needed in needed_ops(row.pattern)]


def test_the_ops_each_row_needs():
    """Hand-read from patterns.py: a requantised conv with bias and activation is a quantize
    of a relu or clip of an add of a conv (its input's dequantize is optional); an
    alternative of two cores needs one of them."""
    assert _needs("vpu.conv2d_bias_act_q") == [{"quantize"}, {"nn.relu", "clip"}, {"add"}, {"nn.conv2d"}]
    assert _needs("vpu.dense_bias") == [{"add"}, {"matmul"}]
    assert _needs("vpu.mul_act") == [{"nn.relu", "clip"}, {"multiply"}]
    assert _needs("vpu.global_avg_pool_q") == [{"quantize"}, {"mean", "nn.adaptive_avg_pool2d"}]
    assert _needs("vpu.reshape") == [{"reshape", "flatten", "squeeze", "expand_dims"}]
    assert _needs("vpu.concat") == [{"concat"}]


def test_rows_kept_for_a_module_of_convs_and_adds():
    ops = {"relax.nn.conv2d", "relax.add", "relax.dequantize"}
    kept = {r.name for r in pattern_table() if may_match(r, ops)}
    assert kept == {"vpu.conv2d", "vpu.conv2d_bias", "vpu.add"}


def _annotate_calls(monkeypatch, model, **options):
    import vpuc.compiler.partition as partition_module

    calls = []
    real = partition_module.annotate
    monkeypatch.setattr(
        partition_module,
        "annotate",
        lambda mod, target, blocked=None: calls.append((mod, target, blocked)) or real(mod, target, blocked),
    )
    prepare_model(model, "vpu", CompileOptions(**options))
    monkeypatch.setattr(partition_module, "annotate", real)
    return calls


@pytest.mark.parametrize(
    "model,options",
    [
        ("zoo:opzoonet", {"quantize": False}),
        ("zoo:transformer_encoder", {"quantize": False}),
        ("zoo:mobilenet_mini", {"calib_synthetic": 4}),
        ("fixture:tflite_dscnn", {}),
    ],
)
def test_the_annotation_is_the_whole_tables(monkeypatch, zoo_dir, fixtures_dir, model, options):
    """Every annotate call of a compile (raw and final cut, the quantiser's partition of the
    float module too), again with every row: the same module, refusals and notes."""
    kind, name = model.split(":")
    path = zoo_dir / f"{name}.onnx" if kind == "zoo" else fixtures_dir / "tf2onnx" / f"{name}.onnx"
    calls = _annotate_calls(monkeypatch, path, **options)
    assert calls
    dropped = 0
    for mod, target, blocked in calls:
        ops = annotate_module._ops_of(mod)
        dropped += sum(not may_match(r, ops) for r in pattern_table())
        filtered, filtered_notes = annotate_module.annotate(mod, target, blocked)
        monkeypatch.setattr(annotate_module, "may_match", lambda row, ops: True)
        whole, whole_notes = annotate_module.annotate(mod, target, blocked)
        monkeypatch.setattr(annotate_module, "may_match", patterns.may_match)
        assert compat.structural_equal(filtered, whole)
        assert filtered_notes.refusals == whole_notes.refusals
        assert filtered_notes.notes == whole_notes.notes
    assert dropped >= 10 * len(calls)  # rows were left out
