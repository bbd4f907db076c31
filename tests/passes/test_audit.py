"""The fusion audit on real graphs: what the transformer's structure says must fuse (counted
from the ONNX graph, not from the passes), node names as the exporter wrote them, the
near misses a user meets, and a binding-to-node mapping that covers every binding."""

from __future__ import annotations

import collections

import onnx
import pytest
from onnx import TensorProto, helper

from vpuc.compiler.frontend import import_model
from vpuc.compiler.passes import Audit
from vpuc.compiler.passes.provenance import import_with_provenance
from vpuc.compiler.pipeline import optimize_imported
from vpuc.examples import zoo


@pytest.fixture(scope="module")
def transformer() -> onnx.ModelProto:
    return zoo.build("transformer_encoder")


def _op_types(model: onnx.ModelProto) -> dict[str, str]:
    return {node.name: node.op_type for node in model.graph.node}


def _expected_counts(model: onnx.ModelProto) -> dict[str, int]:
    """One decomposed LayerNorm per Sqrt, one GELU per Erf, one attention per Softmax, one
    dense per MatMul by a weight (an initializer)."""
    ops = collections.Counter(node.op_type for node in model.graph.node)
    weights = {t.name for t in model.graph.initializer}
    dense = sum(n.op_type == "MatMul" and n.input[1] in weights for n in model.graph.node)
    return {"layer_norm": ops["Sqrt"], "gelu": ops["Erf"], "attention": ops["Softmax"], "dense_bias": dense}


def test_transformer_fuses_what_its_structure_holds(transformer):
    expected = _expected_counts(transformer)
    assert expected == {"layer_norm": 4, "gelu": 2, "attention": 2, "dense_bias": 12}
    audit = optimize_imported(import_model(transformer), "cpu").audit
    fused = collections.Counter(e["pattern"] for e in audit["fused"])
    assert {name: fused[name] for name in expected} == expected
    assert audit["not_fused"] == []


def test_each_fusion_lists_the_onnx_nodes_it_took(transformer):
    """Node names are the model's, and each pattern took the ONNX ops its definition has."""
    op_types = _op_types(transformer)
    audit = optimize_imported(import_model(transformer), "cpu").audit
    shapes = {
        "layer_norm": ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"],
        "gelu": ["Div", "Erf", "Add", "Mul", "Mul"],
        "attention": ["MatMul", "Div", "Softmax", "MatMul"],
        "dense_bias": ["MatMul", "Add"],
    }
    for entry in audit["fused"]:
        if entry["pattern"] in shapes:
            assert [op_types[n] for n in entry["nodes"]] == shapes[entry["pattern"]], entry
    norms = [e["nodes"][0] for e in audit["fused"] if e["pattern"] == "layer_norm"]
    assert norms == [f"layer{i}/norm{j}/mean" for i in (0, 1) for j in (1, 2)]


def _with_near_misses(model: onnx.ModelProto) -> onnx.ModelProto:
    """layer1/norm2's eps becomes a graph input; layer0/norm1's mean a graph output."""
    variant = onnx.ModelProto()
    variant.CopyFrom(model)
    graph = variant.graph
    graph.input.append(helper.make_tensor_value_info("eps", TensorProto.FLOAT, []))
    node = next(n for n in graph.node if n.name == "layer1/norm2/add_eps")
    node.input[1] = "eps"
    graph.output.append(helper.make_tensor_value_info("layer0/norm1/mean", TensorProto.FLOAT, [1, 16, 1]))
    return variant


def test_near_misses_say_which_nodes_and_why(transformer):
    audit = optimize_imported(import_model(_with_near_misses(transformer)), "cpu").audit
    misses = {e["nodes"][0]: e for e in audit["not_fused"] if e["pattern"] == "layer_norm"}
    assert misses["layer1/norm2/mean"]["reason"] == "eps is not a constant"
    assert (
        misses["layer0/norm1/mean"]["reason"]
        == "intermediate 'layer0/norm1/mean' has another consumer ('graph output')"
    )
    assert len(misses["layer1/norm2/mean"]["nodes"]) == 9
    assert sum(e["pattern"] == "layer_norm" for e in audit["fused"]) == 2


def test_every_binding_maps_to_an_onnx_node(fixtures_dir):
    """Including the helpers a converter creates (a Gemm's weight transpose, a bias
    reshape): torch_small_cnn's import has them all."""
    path = fixtures_dir / "exports" / "torch_small_cnn.onnx"
    imported = import_model(path, {"input": (2, 3, 16, 16)})
    mod = import_with_provenance(imported)
    provenance = Audit.of(mod).provenance
    names = {node.name for node in imported.onnx_model.graph.node}
    bindings = [b.var.name for b in mod["main"].body.blocks[0].bindings]
    assert all(name in provenance and set(provenance[name]) <= names for name in bindings)
    assert not [name for name in bindings if name.startswith("lv")]
