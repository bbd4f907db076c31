"""The rewrite prefilter (passes/rewrite.py): a rule whose pattern needs an op the function
does not hold is not tried. It must change nothing but the time: the optimised module and
the fusion audit are those of the pipeline trying every rule at every binding."""

from __future__ import annotations

from pathlib import Path

import pytest
import tvm

from vpuc.compiler import pipeline
from vpuc.compiler.frontend import import_model
from vpuc.compiler.passes import bn_fold, rewrite
from vpuc.compiler.passes.provenance import import_with_provenance
from vpuc.compiler.pipeline import optimize_imported

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "tf2onnx"
ZOO = ("tinyconvnet", "mobilenet_mini", "resnet_mini", "opzoonet", "transformer_encoder")
QDQ = ("tflite_dscnn", "tflite_mobilenet")


def _path(name: str, zoo_dir: Path) -> Path:
    return zoo_dir / f"{name}.onnx" if name in ZOO else FIXTURES / f"{name}.onnx"


def _tried(monkeypatch) -> dict[str, int]:
    """Counts _try_rule's calls per rule name from now on."""
    counts: dict[str, int] = {}
    real = rewrite._try_rule

    def counting(rule, binding, view, claimed):
        counts[rule.name] = counts.get(rule.name, 0) + 1
        return real(rule, binding, view, claimed)

    monkeypatch.setattr(rewrite, "_try_rule", counting)
    return counts


@pytest.mark.parametrize("name", ZOO + QDQ)
def test_the_prefilter_changes_no_output(name, zoo_dir, monkeypatch):
    imported = import_model(_path(name, zoo_dir))
    filtered = optimize_imported(imported, "vpu")
    with monkeypatch.context() as patch:
        patch.setattr(rewrite, "needs_of", lambda rule: frozenset())  # every rule tried everywhere
        patch.setattr(pipeline, "_OPTIMIZED", {})  # the passes run again, not the memo's answer
        everything = optimize_imported(imported, "vpu")
    tvm.ir.assert_structural_equal(filtered.mod, everything.mod)
    assert filtered.audit == everything.audit  # every fusion and near miss, with its reason
    assert filtered.provenance == everything.provenance


def test_a_rule_whose_op_is_absent_is_not_tried(zoo_dir, monkeypatch):
    """bn_fold looks for batch_norm: a QDQ export (its BatchNorms folded by the converter)
    holds none, so none of its rules is tried at any binding; resnet_mini holds some."""
    without = import_with_provenance(import_model(FIXTURES / "tflite_dscnn.onnx"))
    with_bn = import_with_provenance(import_model(zoo_dir / "resnet_mini.onnx"))
    counts = _tried(monkeypatch)
    bn_fold(without, None)
    assert "relax.nn.batch_norm" not in rewrite.ops_in(rewrite.DataflowView(without["main"], None))
    assert counts == {}
    bn_fold(with_bn, None)
    assert counts.get("bn_fold", 0) > 0  # the same rules are tried where their op is


def test_a_pattern_needs_what_every_alternative_holds():
    """An alternative (a | b) needs only what both sides need; a nested call's op counts."""
    from tvm.relax.dpl import is_op, wildcard

    x, w = wildcard(), wildcard()
    conv = is_op("relax.nn.conv2d")(x, w)
    either = is_op("relax.add")(conv, wildcard()) | is_op("relax.add")(wildcard(), conv)
    rule = rewrite.Rule("r", either, (x,), lambda m: None, lambda m: None, needs=frozenset({"relax.clip"}))
    assert rewrite.needs_of(rule) == {"relax.add", "relax.nn.conv2d", "relax.clip"}
    loose = is_op("relax.add")(conv, wildcard()) | is_op("relax.multiply")(wildcard(), wildcard())
    assert rewrite.needs_of(rewrite.Rule("s", loose, (x,), lambda m: None, lambda m: None)) == frozenset()
