"""QDQ input models: parameters kept and checked, uint8 made int8, pairs folded, weights in
the form the VPU patterns take, and evaluation bit-exact with onnxruntime (optimisations
off) on a model made by onnxruntime's own quantiser."""

from __future__ import annotations

import logging
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from qdq_models import qdq_conv

from vpuc.compiler import compat
from vpuc.compiler.frontend import import_model
from vpuc.compiler.quantize import QDQError, check_qdq_onnx, clean_qdq, quantize_qdq, synthetic_calibration
from vpuc.compiler.quantize.bindings import DEQUANTIZE, QUANTIZE, BindingView
from vpuc.compiler.quantize.qdq.strip import is_requantize
from vpuc.examples import zoo

SAMPLES = 12


class _Reader(CalibrationDataReader):
    def __init__(self, model: onnx.ModelProto) -> None:
        self.samples = iter([zoo.sample_inputs(model, seed) for seed in range(8)])

    def get_next(self):
        return next(self.samples, None)


def ort_qdq(name: str, tmp_path, activation=QuantType.QInt8) -> onnx.ModelProto:
    """onnxruntime's static QDQ quantisation of a zoo model (per-channel int8 weights), with
    the int8 tensor before the final dequantize added as a second output."""
    model = zoo.build(name)
    source, target = tmp_path / f"{name}.onnx", tmp_path / f"{name}_qdq.onnx"
    onnx.save(model, source)
    logging.disable(logging.WARNING)
    try:
        quantize_static(
            str(source), str(target), _Reader(model), quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=activation, weight_type=QuantType.QInt8,
        )  # fmt: skip
    finally:
        logging.disable(logging.NOTSET)
    quantized = onnx.load(target)
    final = next(n for n in quantized.graph.node if n.output[0] == quantized.graph.output[0].name)
    elem = onnx.TensorProto.UINT8 if activation == QuantType.QUInt8 else onnx.TensorProto.INT8
    dims = [d.dim_value for d in quantized.graph.output[0].type.tensor_type.shape.dim]
    quantized.graph.output.append(onnx.helper.make_tensor_value_info(final.input[0], elem, dims))
    return quantized


def _run_relax(mod, inputs, samples):
    vm = compat.virtual_machine(compat.build_host(mod, "llvm"))
    return [
        compat.flatten_outputs(vm["main"](*[compat.to_tvm(samples.sample(i)[s.name]) for s in inputs]))
        for i in range(samples.count)
    ]


def _run_ort(model, samples):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [session.run(None, samples.sample(i)) for i in range(samples.count)]


@pytest.mark.parametrize("activation", [QuantType.QInt8, QuantType.QUInt8], ids=["int8", "uint8"])
def test_ort_quantized_model_evaluates_bit_exact_with_onnxruntime(tmp_path, activation):
    model = ort_qdq("tinyconvnet", tmp_path, activation)
    imported = import_model(model)
    cleaned = clean_qdq(imported.mod, {k: [v] for k, v in imported.var_to_node.items()})
    samples = synthetic_calibration(imported.inputs, SAMPLES, seed=5)
    ours, reference = _run_relax(cleaned, imported.inputs, samples), _run_ort(model, samples)
    for mine, theirs in zip(ours, reference, strict=True):
        logits, quantized_logits = theirs  # the int tensor is a model output: its dtype stays
        assert mine[1].dtype == quantized_logits.dtype and np.array_equal(mine[1], quantized_logits)
        assert np.array_equal(mine[0], logits)
    view = BindingView.of(cleaned["main"])
    uint8 = [n for n in view.values if view.tensor_type(n) and view.tensor_type(n)[1] == "uint8"]
    assert uint8 == ([] if activation == QuantType.QInt8 else ["logits_QuantizeLinear"])


def test_cleanup_changes_no_value_of_the_imported_model(tmp_path):
    """On resnet_mini TVM's float conv and onnxruntime's differ by 1 LSB on a few elements
    (summation order), so the exactness of the cleanup passes is checked against the import."""
    model = ort_qdq("resnet_mini", tmp_path)
    imported = import_model(model)
    cleaned = clean_qdq(imported.mod, {})
    samples = synthetic_calibration(imported.inputs, 4, seed=5)
    for raw, mine in zip(
        _run_relax(imported.mod, imported.inputs, samples),
        _run_relax(cleaned, imported.inputs, samples),
        strict=True,
    ):
        assert all(np.array_equal(a, b) for a, b in zip(raw, mine, strict=True))


def test_weights_and_biases_take_the_pattern_form(tmp_path):
    """The importer's reshape(bias) and Gemm's permute_dims(W) move into the int constants:
    every conv/matmul weight and every bias is dequantize(constant) right at the op."""
    imported = import_model(ort_qdq("tinyconvnet", tmp_path))
    view = BindingView.of(clean_qdq(imported.mod, {})["main"])
    for name in view.values:
        if view.op(name) in ("relax.nn.conv2d", "relax.matmul"):
            weight = view.values[name].args[1]
            assert (
                view.op(weight.name) == DEQUANTIZE
                and view.constant(view.values[weight.name].args[0]) is not None
            )
            (bias_add,) = view.readers[name]
            bias = view.values[bias_add].args[1]
            assert view.op(bias.name) == DEQUANTIZE, name
            assert view.constant(view.values[bias.name].args[0]).dtype == np.int32


def _numerically_equal(before, after, model):
    samples = synthetic_calibration(model.inputs, 3, seed=1)
    for a, b in zip(
        _run_relax(before, model.inputs, samples), _run_relax(after, model.inputs, samples), strict=True
    ):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_uint8_becomes_int8_exactly():
    imported = import_model(qdq_conv(act_dtype=np.uint8, act_zero=128))
    cleaned = clean_qdq(imported.mod, {})
    view = BindingView.of(cleaned["main"])
    quantizes = [view.values[n] for n in view.values if view.op(n) == QUANTIZE]
    assert quantizes and all(str(q.attrs.out_dtype) == "int8" for q in quantizes)
    assert int(view.constant(quantizes[0].args[2])) == 0  # 128 - 128
    _numerically_equal(imported.mod, cleaned, imported)


def test_dequantize_then_quantize_with_other_parameters_is_one_requantise():
    imported = import_model(qdq_conv(requant_scale=0.07))
    cleaned = clean_qdq(imported.mod, {})
    view = BindingView.of(cleaned["main"])
    requantized = [n for n, v in view.values.items() if is_requantize(v)]
    assert len(requantized) == 1
    source = view.values[requantized[0]].args[1].fields[0]
    assert view.op(source.name) == QUANTIZE  # reads the int8 tensor, no dequantize between
    _numerically_equal(imported.mod, cleaned, imported)


def test_dequantize_then_quantize_with_equal_parameters_vanishes():
    imported = import_model(qdq_conv(requant_scale=0.1))  # z_quant: scale 0.1 like r_quant, zero 3
    assert len([1 for n in imported.mod["main"].body.blocks[0].bindings if "z_quant" in n.var.name]) == 1
    same = import_model(_with_equal_requant())
    cleaned = clean_qdq(same.mod, {})
    view = BindingView.of(cleaned["main"])
    assert sum(view.op(n) == QUANTIZE for n in view.values) == 2  # x_quant, r_quant
    assert not any(is_requantize(v) for v in view.values.values())
    _numerically_equal(same.mod, cleaned, same)


def _with_equal_requant() -> onnx.ModelProto:
    model = qdq_conv(requant_scale=0.1)
    for init in model.graph.initializer:
        if init.name == "z_zero":
            init.CopyFrom(onnx.numpy_helper.from_array(np.array(-128, np.int8), "z_zero"))
    return model


@pytest.mark.parametrize(
    "kwargs, node, message",
    [
        ({"act_scale": 0.0}, "QuantizeLinear node 'x_quant'", "scale must be positive and finite (got 0)"),
        (
            {"weight_scale": [0.01, -0.02, 0.01, 0.01]},
            "DequantizeLinear node 'w_dequant'",
            "scale must be positive and finite (got -0.02)",
        ),
        (
            {"weight_axis": 1},
            "DequantizeLinear node 'w_dequant'",
            "per-axis parameters have 4 values but axis 1 of the input [4, 3, 3, 3] has 3; axis 0 has 4",
        ),
    ],
    ids=["zero scale", "negative scale", "wrong axis"],
)
def test_bad_qdq_parameters_name_the_node(kwargs, node, message):
    with pytest.raises(QDQError) as error:
        check_qdq_onnx(qdq_conv(**kwargs))
    assert str(error.value) == f"{node}: {message}"
    with pytest.raises(QDQError, match=re.escape(message)):  # the frontend checks first
        import_model(qdq_conv(**kwargs))
    if "weight_axis" not in kwargs:  # TVM's importer itself rejects the wrong axis
        # The Relax-level cleanup checks again, on a module imported past the frontend.
        mod, var_to_node = compat.relax_from_onnx(qdq_conv(**kwargs), {"x": [1, 3, 8, 8]}, {"x": "float32"})
        with pytest.raises(QDQError, match="scale must be positive and finite"):
            clean_qdq(mod, {k: [v] for k, v in var_to_node.items()})


def test_accuracy_report_of_a_qdq_model(tmp_path):
    imported = import_model(ort_qdq("tinyconvnet", tmp_path))
    provenance = {k: [v] for k, v in imported.var_to_node.items()}
    held_out = synthetic_calibration(imported.inputs, 8, seed=0, stream=1)
    result = quantize_qdq(imported.mod, provenance, held_out, [o.name for o in imported.outputs])
    logits = result.accuracy["outputs"][0]
    assert logits["name"] == "logits" and logits["sqnr_db"] > 30.0 and logits["top1_agreement"] == 1.0
    names = [layer["name"] for layer in result.accuracy["layers"]]
    assert names[:2] == ["input", "stage1/conv"] and len(names) >= 10
    assert all(layer["sqnr_db"] > 25.0 for layer in result.accuracy["layers"])
    assert result.placement is None and result.summary["mode"].startswith("qdq")
