"""layout: NCHW -> NHWC for the VPU, with the transposes that remain counted; for the CPU,
NHWC only where it leaves fewer transposes (the bench measured the same conv speed)."""

from __future__ import annotations

import numpy as np
import onnx
from pass_testing import assert_rewrites_to, bind, named, rng_array
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from vpuc.compiler.frontend import import_model
from vpuc.compiler.passes import Audit, PassOptions, fold_constants, layout, strip_audit, transpose_cleanup
from vpuc.compiler.passes.layout import count_transposes
from vpuc.compiler.passes.provenance import import_with_provenance
from vpuc.examples import zoo


def _convs(mod) -> list[tuple[str, str]]:
    return [
        (str(b.value.attrs.data_layout), str(b.value.attrs.kernel_layout))
        for b in mod["main"].body.blocks[0].bindings
        if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == "relax.nn.conv2d"
    ]


def _after_layout(model: onnx.ModelProto, shapes=None, **options):
    mod = import_with_provenance(import_model(model, shapes))
    mod = fold_constants(mod, PassOptions(**options))
    mod = layout(mod, PassOptions(**options))
    return transpose_cleanup(fold_constants(mod, PassOptions(**options)), PassOptions(**options))


def test_vpu_converts_every_conv_and_only_the_input_transpose_remains():
    """tinyconvnet in NHWC: the input NCHW -> NHWC transpose stays (the graph's boundary);
    the one ConvertLayout puts before the flatten moves only unit axes (1x1 after the
    global pool) and became a reshape."""
    mod = _after_layout(zoo.build("tinyconvnet"), target_kind="vpu")
    assert set(_convs(mod)) == {("NHWC", "OHWI")}
    assert count_transposes(mod) == 1
    decision = Audit.of(mod).layout
    assert decision["choice"] == "NHWC" and decision["convs"] == 4


def test_cpu_keeps_nchw_where_nhwc_would_only_add_transposes():
    mod = _after_layout(zoo.build("resnet_mini"), target_kind="cpu")
    assert set(_convs(mod)) == {("NCHW", "OIHW")} and count_transposes(mod) == 0
    (kept,) = Audit.of(mod).to_json()["not_fused"]
    assert kept["pattern"] == "layout" and kept["reason"].startswith(
        "kept NCHW: NHWC would leave 1 transposes"
    )


def test_cpu_takes_nhwc_for_an_nhwc_model(fixtures_dir):
    """tf2onnx's NHWC input is transposed to NCHW for the conv and back for the flatten:
    in NHWC both transposes cancel against ConvertLayout's."""
    path = fixtures_dir / "exports" / "tf2onnx_style.onnx"
    mod = _after_layout(onnx.load(path), {"input_1": (2, 8, 8, 3)}, target_kind="cpu")
    assert _convs(mod) == [("NHWC", "OHWI")] and count_transposes(mod) == 0
    assert Audit.of(mod).layout["choice"] == "NHWC"


def test_cpu_layout_can_be_forced():
    mod = _after_layout(zoo.build("tinyconvnet"), target_kind="cpu", cpu_layout="NHWC")
    assert set(_convs(mod)) == {("NHWC", "OHWI")}
    assert Audit.of(mod).layout["reason"] == "forced by cpu_layout=NHWC"


def test_a_model_without_convs_is_left_alone():
    mod = import_with_provenance(import_model(zoo.build("transformer_encoder")))
    assert layout(mod, PassOptions(target_kind="vpu")).same_as(mod)


@I.ir_module
class ConvRelu:
    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32")):
        with R.dataflow():
            conv = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            out = R.nn.relu(conv)
            R.output(out)
        return out


@I.ir_module
class ConvReluNhwc:
    @R.function
    def main(x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32")):
        with R.dataflow():
            xt = R.permute_dims(x, axes=[0, 2, 3, 1])
            conv = R.nn.conv2d(
                xt, w, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC"
            )
            relu = R.nn.relu(conv)
            out = R.permute_dims(relu, axes=[0, 3, 1, 2])
            R.output(out)
        return out


def test_vpu_layout_before_and_after():
    """layout, then fold_layout_constants and layout_cleanup as the pipeline runs them: the
    conv reads NHWC with its weight transposed OIHW -> OHWI once, at compile time; relu
    follows the conv's layout; the boundaries keep the graph's NCHW."""
    w = rng_array((4, 3, 3, 3))
    options = PassOptions(target_kind="vpu")
    mod = layout(named(bind(ConvRelu, w=w)), options)
    mod = strip_audit(transpose_cleanup(fold_constants(mod, options), options))
    assert_rewrites_to(mod, bind(ConvReluNhwc, w=np.ascontiguousarray(w.transpose(0, 2, 3, 1))))
