"""Before quantisation and partitioning (VPU targets): ops the target's VPU lacks, written as
ops it has, where that is exact or near (Vela does the same: Mean becomes a depthwise conv).

    avg_pool2d(x) whose window is all of H x W, no padding
        -> mean(x, H and W, keepdims)                                    exact   global_avg_pool
    mean(x, H and W) on a target without global_avg_pool
        -> depthwise conv2d(x, 1/(kh*kw)) [-> ... ]  -> 1x1 per channel   near    conv2d
           one conv when W fits the conv's kernel limit (H past it: sub-kernels of
           kernel rows accumulated in int32, codegen/kernel_split.py); else stages of
           non-overlapping windows (kernel = stride within the stride limit), the last
           covering what is left; between stages the tensor keeps x's int8 parameters
           (in a QDQ module only where that rounding stays within half a step of the
           mean's own quantisation: the model's QDQ answer stays within 1 LSB); where
           no stages tile the window or their rounding is too coarse, one conv, its
           kernel rows and columns as sub-kernels (exact up to the requantisation)
    avg_pool2d(x) past the target's pool window or padding limits, no padding or padding
    counted (count_include_pad), no ceil_mode or dilation
        -> depthwise conv2d(x, 1/(kh*kw), the pool's strides and padding)  exact   conv2d

In a QDQ module the conv's weight is dequantize(1 (int8), scale 1/(kh*kw) per channel), and
the requantisation is the mean's own: exact up to the rounding of the requantisation scale
for one stage; each extra stage adds one rounding at x's scale (near): up to half of x's
step each, which can be many steps of the mean's finer output scale (a fuzzer finding:
GlobalAveragePool over 2x8 on vpu came out 6 LSB low), so a QDQ module gets stages only when
(stages - 1) * scale(x) <= scale(mean), and otherwise one conv with sub-kernels (the mean's
own rounding; before kernel columns could be split the mean stayed on the CPU). A float module gets
float weights 1/(kh*kw), which the quantiser quantises like any conv's.

    x * a + b per channel (a BatchNorm bn_fold could not fold)
        -> depthwise 1x1 conv(x, a) + b                                  near    conv2d
           in a QDQ module only where its int8 weights and int32 bias (at the input's
           scale) are less than one output step from the float answer for every int8 x

`decompose_for_vpu` returns the module, the provenance of the new bindings (the node they
replace) and, per ONNX node, what it became or why no decomposition applies (the partition
report shows both).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.lower.codegen.kernel_split import split_reason
from vpuc.compiler.partition.opview import op_name
from vpuc.targets import Target

NHWC_SPATIAL, NCHW_SPATIAL = (1, 2), (2, 3)


@dataclass
class Decomposed:
    mod: tvm.IRModule
    provenance: dict[str, list[str]]
    notes: dict[str, str] = field(default_factory=dict)  # ONNX node -> what it became / why not


def decompose_for_vpu(mod: tvm.IRModule, target: Target, provenance: dict[str, list[str]]) -> Decomposed:
    provenance = dict(provenance)
    mutator_ = _Decomposer(mod, target, provenance)
    func = relax.analysis.remove_all_unused(mutator_.visit_expr(mod["main"]))
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), func)
    return Decomposed(new_mod, provenance, mutator_.notes)


def _spatial(call: relax.Call) -> tuple[int, int] | None:
    """The spatial axes a 4-D mean or global pool reduces: NHWC (1, 2) or NCHW (2, 3)."""
    shape = compat.tensor_type(call.args[0])
    if shape is None or len(shape[0]) != 4:
        return None
    if op_name(call) == "relax.nn.avg_pool2d":
        attrs = call.attrs
        layout = str(attrs.layout)
        if layout not in ("NHWC", "NCHW") or any(int(p) for p in attrs.padding):
            return None
        axes = NHWC_SPATIAL if layout == "NHWC" else NCHW_SPATIAL
        window = tuple(int(k) for k in attrs.pool_size)
        if window != tuple(shape[0][a] for a in axes) or int(attrs.dilation[0]) != 1:
            return None
        return axes
    if op_name(call) == "relax.mean" and call.attrs.axis is not None:
        axes = tuple(sorted(int(a) % 4 for a in call.attrs.axis))
        return axes if axes in (NHWC_SPATIAL, NCHW_SPATIAL) else None
    return None


def stages(extent: int, kernel_max: int, stride_max: int) -> list[int] | None:
    """Window sizes whose product is `extent`: each but the last within the stride limit
    (kernel = stride, non-overlapping), the last within the kernel limit; None if none."""
    if extent <= kernel_max:
        return [extent]
    for factor in range(min(stride_max, extent - 1), 1, -1):
        if extent % factor == 0:
            rest = stages(extent // factor, kernel_max, stride_max)
            if rest is not None:
                return [factor, *rest]
    return None


@mutator
class _Decomposer(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, target: Target, provenance: dict[str, list[str]]) -> None:
        super().__init__(mod)
        self.target, self.provenance = target, provenance
        self.bound = relax.analysis.get_var2val(mod["main"])
        # the scale each tensor is quantised to by a per-tensor quantize reading it (QDQ)
        self.quantized_to = {
            value.args[0]: float(scale)
            for value in self.bound.values()
            if op_name(value) == "relax.quantize"
            and isinstance(value.args[0], relax.Var)
            and (scale := compat.constant_array(value.args[1])) is not None
            and scale.size == 1
        }
        self.notes: dict[str, str] = {}
        self.names = {b.var.name for block in mod["main"].body.blocks for b in block.bindings}

    def visit_var_binding_(self, binding) -> None:
        value = binding.value
        affine = self._channel_affine(value) if self.target.supports("conv2d") else None
        if affine is not None and isinstance(binding.var, relax.DataflowVar):
            expr = self._affine_conv(binding.var, *affine)
            if expr is None:  # its int8 form is too coarse: the multiply-add stays on the CPU
                super().visit_var_binding_(binding)
                return
            self.set_var_remap(binding.var, self.builder_.emit(expr, binding.var.name))
            return
        axes = _spatial(value) if isinstance(value, relax.Call) else None
        dataflow = isinstance(binding.var, relax.DataflowVar)
        if axes is None and dataflow and op_name(value) == "relax.nn.avg_pool2d":
            expr = self._pool_as_conv(binding.var, value)
            if expr is not None:
                self.set_var_remap(binding.var, self.builder_.emit(expr, name_hint=binding.var.name))
                return
        if axes is None or not isinstance(binding.var, relax.DataflowVar):
            super().visit_var_binding_(binding)
            return
        data = self.visit_expr(value.args[0])
        expr = None
        if self.target.supports("global_avg_pool"):
            if op_name(value) == "relax.nn.avg_pool2d":
                expr = relax.op.mean(data, list(axes), keepdims=True)
                self._note(binding.var, "AveragePool over all of H x W as a mean over H and W (exact)")
        elif self.target.supports("conv2d"):
            expr = self._as_depthwise(binding.var, value, data, axes)
        if expr is None:
            super().visit_var_binding_(binding)
            return
        new = self.builder_.emit(expr, name_hint=binding.var.name)
        self.set_var_remap(binding.var, new)

    def _channel_affine(self, value):
        """add(multiply(x, a), b) with a, b constants per channel of a 4-D x (a BatchNorm the
        graph passes could not fold, bn_fold's bn_affine): (x, a, b, nhwc) or None."""
        if op_name(value) != "relax.add" or not isinstance(value.args[0], relax.Var):
            return None
        product, shift = self.bound.get(value.args[0]), compat.constant_array(value.args[1])
        if op_name(product) != "relax.multiply" or shift is None:
            return None
        data, scale = product.args[0], compat.constant_array(product.args[1])
        shape = compat.tensor_type(data)
        if scale is None or shape is None or len(shape[0]) != 4 or shape[1] != "float32":
            return None
        for nhwc, axis in ((True, 3), (False, 1)):
            channels = shape[0][axis]
            per_channel = [1, 1, 1, channels] if nhwc else [1, channels, 1, 1]
            if all(list(c.shape) in (per_channel, [channels]) for c in (scale, shift)) and channels > 1:
                return data, scale.reshape(-1), shift.reshape(-1), nhwc
        return None

    def _affine_conv(self, var, data, scale, shift, nhwc: bool) -> relax.Expr | None:
        """x * a + b per channel as a depthwise 1x1 conv with bias (exact in float; int8
        weights a / s, s = |a| / 127 per channel, as the quantiser would make them); None
        where that int8 form is too coarse (_affine_too_coarse)."""
        channels = scale.size
        shape = (channels, 1, 1, 1)
        params = self._input_params(data)
        if params is None:
            weight = relax.const(scale.reshape(shape).astype(np.float32), "float32")
            bias = relax.const(shift.astype(np.float32), "float32")
        else:
            w_scale = (np.maximum(np.abs(scale), 1e-12) / np.float32(127)).astype(np.float32)
            w_q = np.clip(np.rint(scale / w_scale), -127, 127).astype(np.int8).reshape(shape)
            weight = relax.op.dequantize(
                relax.const(w_q, "int8"), relax.const(w_scale, "float32"),
                relax.const(np.zeros(channels, np.int8), "int8"), 0, "float32",
            )  # fmt: skip
            b_scale = (np.float32(compat.constant_array(params[0])) * w_scale).astype(np.float32)
            b_q = np.rint(shift / b_scale).astype(np.int32)
            if self._affine_too_coarse(var, params, scale, shift, w_q, w_scale, b_q, b_scale):
                return None
            bias = relax.op.dequantize(
                relax.const(b_q, "int32"), relax.const(b_scale, "float32"),
                relax.const(np.zeros(channels, np.int32), "int32"), 0, "float32",
            )  # fmt: skip
        conv = self._emit(
            relax.op.nn.conv2d(  # x as rewritten (a mean before it may be a conv now)
                self.visit_expr(data), weight, groups=channels, data_layout="NHWC" if nhwc else "NCHW",
                kernel_layout="OHWI" if nhwc else "OIHW",
            ),
            f"{var.name}_conv", var,
        )  # fmt: skip
        bias_shape = [1, 1, 1, channels] if nhwc else [1, channels, 1, 1]
        self._note(var, "a per-channel multiply-add (BatchNormalization) as a depthwise 1x1 conv with bias")
        return relax.op.add(
            conv,
            relax.op.reshape(bias, bias_shape)
            if params is not None
            else relax.const(shift.reshape(bias_shape).astype(np.float32), "float32"),
        )

    def _affine_too_coarse(self, var, params, scale, shift, w_q, w_scale, b_q, b_scale) -> bool:
        """Whether the int8 depthwise form of x * a + b can be a whole output step or more from
        the float multiply-add for some int8 x (then the model's QDQ answer, which rounds the
        float one, could be 2 LSB or more away; a fuzzer finding, vpu-0ddc546d35: an input
        scale of 1.0 made the bias's step, input scale x weight scale, several output steps).
        Worst case per channel: in_scale * max|x - zp| * |a - w| + |b - bias|, in float64."""
        step_out = self.quantized_to.get(var)
        if step_out is None:
            return False
        in_scale = float(compat.constant_array(params[0]))
        zero = int(compat.constant_array(params[1]))
        reach = max(abs(-128 - zero), abs(127 - zero))
        weight_error = np.abs(scale - w_q.reshape(-1).astype(np.float64) * w_scale)
        bias_error = np.abs(shift - b_q.astype(np.float64) * b_scale)
        worst = float(np.max(in_scale * reach * weight_error + bias_error))
        if worst < step_out:
            return False
        self._note(
            var,
            "no decomposition: a per-channel multiply-add (BatchNormalization) as a depthwise 1x1 "
            f"conv with int8 weights and int32 bias at the input's scale {in_scale:.3g} is up to "
            f"{worst / step_out:.1f} output steps ({step_out:.3g}) from the float one",
        )
        return True

    def _note(self, var: relax.Var, text: str) -> None:
        for node in self.provenance.get(var.name, []):
            self.notes[node] = text

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def _as_depthwise(self, var, call: relax.Call, data: relax.Expr, axes) -> relax.Expr | None:
        shape = compat.tensor_type(call.args[0])[0]
        limits = self.target.op_limits("conv2d")
        kernel_max = int(limits.get("kernel", [1, 7])[1])
        stride_max = int(limits.get("stride", [1, 3])[1])
        height, width = shape[axes[0]], shape[axes[1]]
        plan_h, plan_w = stages(height, kernel_max, stride_max), stages(width, kernel_max, stride_max)
        qdq = self._input_params(call.args[0])
        coarse = self._stages_too_coarse(var, height, width, plan_h, plan_w, qdq)
        # one conv over the whole window, its kernel as sub-kernels accumulated in int32
        # (kernel_split.py): the mean's own single rounding. Taken where the kernel rows alone
        # are split (W within the limit), and where stages do not tile the window or their
        # rounding is too coarse; elsewhere the stages stay (fewer instructions).
        window = (height, width)
        split, _ = split_reason(window, (0, 0, 0, 0), (1, 1), (1, 1), window, (1, 1), self.target)
        tiled = plan_h is not None and plan_w is not None
        one_conv = split is not None and (width <= kernel_max or not tiled or coarse is not None)
        if one_conv:
            plan_h, plan_w = [height], [width]
        elif not tiled:
            self._note(
                var,
                f"no decomposition: a mean over {height}x{width} needs windows that the conv limits "
                f"(kernel <= {kernel_max}, stride <= {stride_max}) cannot tile",
            )
            return None
        elif coarse is not None:
            self._note(var, coarse)
            return None
        count = max(len(plan_h), len(plan_w))
        plan_h, plan_w = [1] * (count - len(plan_h)) + plan_h, [1] * (count - len(plan_w)) + plan_w
        nhwc = axes == NHWC_SPATIAL
        channels = shape[3] if nhwc else shape[1]
        current = data
        for index, (kh, kw) in enumerate(zip(plan_h, plan_w, strict=True)):
            last = index == count - 1
            weight = self._weight(channels, kh, kw, nhwc, qdq is not None)
            conv = relax.op.nn.conv2d(
                current, weight, strides=(1, 1) if last else (kh, kw), groups=channels,
                data_layout="NHWC" if nhwc else "NCHW", kernel_layout="OHWI" if nhwc else "OIHW",
            )  # fmt: skip
            if last:
                current = conv
                break
            current = self._emit(conv, f"{var.name}_stage{index}", var)
            if qdq is not None:  # between stages the tensor keeps x's int8 parameters
                scale, zero = qdq
                stage = f"{var.name}_stage{index}"
                quantized = self._emit(relax.op.quantize(current, scale, zero, -1, "int8"), f"{stage}_q", var)
                dequantized = relax.op.dequantize(quantized, scale, zero, -1, "float32")
                current = self._emit(dequantized, f"{stage}_dq", var)
        keepdims = op_name(call) == "relax.nn.avg_pool2d" or bool(call.attrs.keepdims)
        if not keepdims:
            out_shape = [d for i, d in enumerate(shape) if i not in axes]
            current = relax.op.reshape(self._emit(current, f"{var.name}_conv", var), out_shape)
        steps = " -> ".join(f"{kh}x{kw}" for kh, kw in zip(plan_h, plan_w, strict=True))
        rounding = f"near: {count - 1} intermediate rounding(s)"
        how = "exact up to the requantisation" if count == 1 else rounding
        if one_conv:
            how = f"{how}; one conv, its kernel as sub-kernels accumulated in int32"
        self._note(var, f"mean over {height}x{width} as depthwise conv {steps} with weights 1/window ({how})")
        return current

    def _stages_too_coarse(self, var, height, width, plan_h, plan_w, qdq) -> str | None:
        """Why the stages' roundings at the input's step are too coarse for a QDQ module (more
        than 1 LSB from its answer), or None."""
        count = max(len(plan_h or [1]), len(plan_w or [1]))
        if qdq is None or count == 1:
            return None
        step_in = float(compat.constant_array(qdq[0]))
        step_out = self.quantized_to.get(var)
        if step_out is not None and (count - 1) * step_in <= step_out:
            return None
        out = "an output in float" if step_out is None else f"the mean's step {step_out:.3g}"
        return (
            f"no decomposition: a mean over {height}x{width} needs {count} conv stages, whose "
            f"rounding at the input's step {step_in:.3g} is coarser than {out} "
            "(more than 1 LSB from the model's QDQ answer)"
        )

    def _pool_as_conv(self, var, call: relax.Call) -> relax.Expr | None:
        """An average pool past the VPU's pool window or padding limits as one
        depthwise conv with weights 1/window, its kernel rows as sub-kernels accumulated in
        int32: the pool's own single rounding. Exact where every window divides by the whole
        window (no padding, or padding counted: the conv's pad value is the zero point)."""
        attrs, shape = call.attrs, compat.tensor_type(call.args[0])
        layout = str(attrs.layout)
        if layout not in ("NHWC", "NCHW") or shape is None or not self.target.supports("conv2d"):
            return None
        (kh, kw), strides = (int(k) for k in attrs.pool_size), tuple(int(s) for s in attrs.strides)
        padding = tuple(int(p) for p in attrs.padding)
        if not self.target.supports("avg_pool2d"):
            return None  # (a target without pools keeps the op list's reason: not yet)
        limits = self.target.op_limits("avg_pool2d")
        pool_max, pad_max = int(limits.get("pool", [1, 255])[1]), int(limits.get("padding", [0, 255])[1])
        if max(kh, kw) <= pool_max and max(padding) <= pad_max:
            return None  # the VPU pools it
        axes = NHWC_SPATIAL if layout == "NHWC" else NCHW_SPATIAL
        in_hw = tuple(shape[0][a] for a in axes)
        out_hw = tuple(compat.tensor_type(var)[0][a] for a in axes)
        stride_max = int(self.target.op_limits("conv2d").get("stride", [1, 3])[1])
        why_not = None
        if bool(attrs.ceil_mode) or any(int(d) != 1 for d in attrs.dilation):
            why_not = "no decomposition: ceil_mode or dilation"
        elif any(padding) and not bool(attrs.count_include_pad):
            why_not = "no decomposition: its padded windows divide by fewer elements (count_include_pad=0)"
        elif max(strides) > stride_max:
            why_not = f"no decomposition: stride {list(strides)} past the conv limit ({stride_max})"
        else:
            _, why_not = split_reason((kh, kw), padding, strides, (1, 1), in_hw, out_hw, self.target)
        if why_not is not None:
            self._note(var, f"AveragePool {kh}x{kw} as a depthwise conv: {why_not}")
            return None
        nhwc = layout == "NHWC"
        channels = shape[0][3] if nhwc else shape[0][1]
        weight = self._weight(channels, kh, kw, nhwc, self._input_params(call.args[0]) is not None)
        how = "with weights 1/window (exact up to the requantisation)"
        self._note(var, f"AveragePool {kh}x{kw} as a depthwise conv {how}")
        return relax.op.nn.conv2d(
            self.visit_expr(call.args[0]), weight, strides=strides, padding=padding, groups=channels,
            data_layout=layout, kernel_layout="OHWI" if nhwc else "OIHW",
        )  # fmt: skip

    def _emit(self, expr: relax.Expr, base: str, origin: relax.Var) -> relax.Var:
        name = self._fresh(base)
        new = self.builder_.emit(expr, name_hint=name)
        self.provenance[name] = list(self.provenance.get(origin.name, []))
        return new

    def _input_params(self, arg: relax.Expr):
        """(scale, zero point) when the op reads dequantize(x) with per-tensor parameters."""
        value = self.bound.get(arg) if isinstance(arg, relax.Var) else None
        if op_name(value) != "relax.dequantize":
            return None
        scale, zero = compat.constant_array(value.args[1]), compat.constant_array(value.args[2])
        if scale is None or zero is None or scale.size != 1 or str(zero.dtype) != "int8":
            return None
        return value.args[1], value.args[2]

    def _weight(self, channels: int, kh: int, kw: int, nhwc: bool, quantized: bool) -> relax.Expr:
        shape = (channels, kh, kw, 1) if nhwc else (channels, 1, kh, kw)
        taps = np.float32(kh * kw)
        if not quantized:
            return relax.const(np.full(shape, 1.0 / taps, np.float32), "float32")
        scale = relax.const(np.full(channels, np.float32(1.0) / taps, np.float32), "float32")
        ones = relax.const(np.ones(shape, np.int8), "int8")
        zero = relax.const(np.zeros(channels, np.int8), "int8")
        return relax.op.dequantize(ones, scale, zero, 0, "float32")
