"""One answer to "does this layer fit, what does it cost": the partitioner asks the code
generator before the cut is final, so every layer the code generator refuses is known at
once and the quantised module is partitioned once (DESIGN.md, contract 6)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler import driver
from vpuc.compiler.driver import CompileOptions, prepare_model


def _qdq_chain(weight_zeros: list[int]) -> onnx.ModelProto:
    """x -> Q/DQ -> [Conv 3x3 (int8 weights with the given zero point) -> Relu -> Q/DQ] per
    entry. The MAC array has no weight zero point, so the code generator's reader refuses
    every conv whose weights have one; the op list itself has no such check."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int8), "z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"], name="x_quant"),
        helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["t0"], name="x_dequant"),
    ]
    for i, zero in enumerate(weight_zeros):
        inits += [
            numpy_helper.from_array(rng.integers(-100, 100, (4, 4, 3, 3)).astype(np.int8), f"w{i}_q"),
            numpy_helper.from_array(np.array(0.01, np.float32), f"w{i}_s"),
            numpy_helper.from_array(np.array(zero, np.int8), f"w{i}_z"),
        ]
        nodes += [
            helper.make_node(
                "DequantizeLinear", [f"w{i}_q", f"w{i}_s", f"w{i}_z"], [f"w{i}"], name=f"w{i}_dequant"
            ),
            helper.make_node("Conv", [f"t{i}", f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
            helper.make_node("QuantizeLinear", [f"r{i}", "s", "z"], [f"r{i}_q"], name=f"r{i}_quant"),
            helper.make_node("DequantizeLinear", [f"r{i}_q", "s", "z"], [f"t{i + 1}"], name=f"r{i}_dequant"),
        ]
    graph = helper.make_graph(
        nodes,
        "qdq_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
        [helper.make_tensor_value_info(f"t{len(weight_zeros)}", TensorProto.FLOAT, [1, 4, 12, 12])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_every_refusal_is_known_before_the_cut_and_the_module_is_partitioned_once(monkeypatch):
    calls = []
    real = driver.partition_for_vpu

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "partition_for_vpu", counting)
    # two refused convs apart: the old loop found one per lowering (three partitions)
    prepared = prepare_model(_qdq_chain([0, 3, 0, 5, 0]), "vpu", CompileOptions(profitability=False))
    assert len(calls) == 1
    assert prepared.lowering_rounds == 1
    ops = {row["name"]: row for row in prepared.partition.report["ops"]}
    for refused in ("conv1", "conv3"):
        assert ops[refused]["device"] == "cpu"
        assert "the VPU code generator cannot lower it" in ops[refused]["reason"]
        assert "non-zero zero point" in ops[refused]["reason"]
    for kept in ("conv2", "conv4"):
        assert ops[kept]["device"] == "vpu", ops[kept]
