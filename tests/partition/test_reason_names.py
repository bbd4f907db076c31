"""Issue 20: the reasons `vpuc partition` gives name what the user's ONNX file names, and a
match refused because it would leak a value says so.

- Names: the code generator's refusals named the tensors of a VPU function by the Relax vars
  the partitioning made ('gv', 'lv12'); they now take the ONNX node of the layer that computes
  them, through the provenance the graph passes kept (compiler/lower/reader/names.py).
- Leaks: a pattern may not take a value that is also read outside it (a VPU layer writes one
  tensor); the refused match left no reason of its own, and the op showed a neighbouring
  match's ("the VPU computes int8 tensors (its result is float32)", the float pattern's).
"""

from __future__ import annotations

import json
import re

import onnx
import pytest

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower import vpu_functions
from vpuc.compiler.lower.reader.extract import extract_subgraph
from vpuc.compiler.lower.reader.names import param_names
from vpuc.examples.graph_builder import GraphBuilder

SHAPE = [1, 4, 12, 14]
RELAX_NAME = re.compile(r"\b[gl]v\d*\b")  # the names Relax's partitioning gives its bindings


def _concat_twice() -> onnx.ModelProto:
    """Concat(a, a) with `a` also a model output: the code generator refuses the concat and
    names its input (before: "concatenation input 'gv'")."""
    b = GraphBuilder("concat_twice", seed=5)
    a = b.op("Relu", [b.conv("x", "a", 4, 4, kernel=1)], "a_relu")
    cat = b.op("Concat", [a, a], "cat", axis=1)
    y = b.op("Relu", [b.conv(cat, "post", 8, 8, kernel=1)], "post_relu")
    return b.model({"x": SHAPE}, {y: [1, 8, 12, 14], a: SHAPE})


def _fused_relu_read_twice(tmp_path):
    """An onnxruntime QDQ export whose Relu reads the conv's float output directly (a fused
    activation, as exporters write it), the conv's output quantised for a second reader, a
    model output: every conv pattern that would take the Relu or the requantisation leaks
    the conv's output, and the Relu reads a float tensor (before: "'gv' is float32")."""
    b = GraphBuilder("fused", seed=5)
    c = b.conv("x", "c", 4, 4, kernel=3)
    r = b.op("Relu", [c], "r")
    y = b.op("Relu", [b.conv(r, "c2", 4, 4, kernel=1)], "r2")
    folder = tmp_path / "fused"
    folder.mkdir()
    _, qdq_path = quantize_qdq(b.model({"x": SHAPE}, {y: SHAPE, c: SHAPE}), folder, SHAPE)
    model = onnx.load(qdq_path)
    nodes = {n.name: n for n in model.graph.node}
    nodes["r"].input[0] = nodes["c"].output[0]  # the Relu skips the conv's Q -> DQ
    onnx.checker.check_model(model)
    path = folder / "fused.onnx"
    onnx.save(model, path)
    return path


def _partition(vpuc, path, target: str) -> dict:
    ran = vpuc("partition", path, "--target", target, "--json", "--no-profitability")
    assert ran.returncode == 0, ran.stderr
    return {o["name"]: o for o in json.loads(ran.stdout)["ops"]}


@pytest.mark.parametrize("target", ["vpu", "u55-256"])
def test_no_reason_names_a_relax_internal_tensor(vpuc, tmp_path, target):
    _, concat_path = quantize_qdq(_concat_twice(), tmp_path, SHAPE)
    for path in (concat_path, _fused_relu_read_twice(tmp_path)):
        ops = _partition(vpuc, path, target)
        internal = [(n, o["reason"]) for n, o in ops.items() if RELAX_NAME.search(o["reason"])]
        assert not internal, internal
        if path == concat_path:
            assert "concatenation input 'a' is also an output" in ops["cat"]["reason"], ops["cat"]["reason"]
        else:
            assert "('c' is float32)" in ops["r"]["reason"], ops["r"]["reason"]


def test_a_match_refused_for_a_leak_gives_its_own_reason(vpuc, tmp_path):
    ops = _partition(vpuc, _fused_relu_read_twice(tmp_path), "vpu")
    reason = ops["c"]["reason"]
    assert ops["c"]["device"] == "cpu"
    assert "vpu.conv2d_bias_act_q: 'c' is also read outside it, by 'c_QuantizeLinear'" in reason, reason
    assert "vpu.conv2d_bias_q: 'c' is also read outside it, by 'r'" in reason, reason


def test_a_vpu_subgraph_input_another_computes_takes_that_layers_name(tmp_path):
    """conv `a` -> relu on the VPU; Sigmoid on the host (`vpu` has no lookup table); their
    Add on the VPU: the Add's subgraph cannot join the conv's (the host op between them),
    so it reads the conv's result as a parameter, which main binds to a var the
    partitioning named ('gv', 'lv'). Its tensor takes the conv layer's name, 'a'."""
    b = GraphBuilder("two_subgraphs", seed=5)
    a = b.op("Relu", [b.conv("x", "a", 4, 4, kernel=3)], "a_relu")
    gate = b.op("Sigmoid", [a], "gate")
    y = b.op("Add", [a, gate], "add")
    _, qdq_path = quantize_qdq(b.model({"x": SHAPE}, {y: SHAPE}), tmp_path, SHAPE)
    options = CompileOptions(profitability=False, reference=False)
    prepared = prepare_model(qdq_path, "vpu", options)
    mod, provenance = prepared.partition.mod, prepared.provenance
    ops = {o["name"]: o for o in prepared.partition.report["ops"]}
    assert ops["a"]["subgraph"] != ops["add"]["subgraph"], ops["add"]["reason"]
    names = param_names(mod, provenance)
    functions = vpu_functions(mod)
    (gv, func) = functions[ops["add"]["subgraph"]]
    subgraph = extract_subgraph(func, "sg", provenance, param_names=names.get(gv))
    assert "a" in subgraph.inputs, subgraph.inputs
    assert not [n for n in subgraph.inputs if RELAX_NAME.fullmatch(n)], subgraph.inputs
