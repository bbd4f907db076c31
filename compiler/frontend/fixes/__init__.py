"""Frontend step 3b (frontend/fixes): rewrite the ONNX nodes TVM's importer converts wrongly into equivalent
ONNX that it converts right. Found by ONNX's own backend node tests (tests/onnx_node):
each of these gave a wrong answer without an error.

    LayerNormalization -> Mean, InvStdDev  the importer returns 0-d placeholders: computed
                                           here with ReduceMean (in float32, stash_type 1)
    IsInf(detect_positive/negative = 0)    the importer ignores the flags: And with x > 0 / x < 0
    SpaceToDepth(mode="CRD")               the importer ignores the mode: Reshape/Transpose
    BitShift by < 0 or >= the bit width    LLVM's shift is undefined there; ONNX says 0 (or -1
                                           for a negative x shifted right): a Where around it
    Mod(fmod=0) of floats by +-inf         TVM gives NaN; ONNX (numpy) gives x or y
    Dropout (inference)                    the mask comes back float32: Identity + all-true mask
    ConvTranspose(output_shape)            the importer ignores it: output_padding instead
    Pow(float x, int y)                    the importer refuses mixed types: Cast y to x's type
    Clip of integers without min or max    the importer clips at +-inf, which LLVM cannot
                                           hold in an integer: the type's limits instead
    ReduceMax/ReduceMin of floats          TVM starts from the lowest/highest finite value,
                                           so all -inf (+inf) reduces to it: the infinity
                                           where no element equals that limit
    ReduceMax/ReduceMin of bools           TVM has no bool limits: via uint8
    Softplus, Mish                         log(1 + e^x) loses e^x below 1e-4 in float32:
                                           the series e^x (1 - e^x/2 + e^2x/3) for x < -4
    float16 MatMul/Gemm/Conv/Softmax       TVM accumulates in float16 (several ULPs off
                                           ONNX's, which accumulates in float32): in float32

and three the importer failed on (a refusal before, or a wrong shape):

    EyeLike(dtype) of another type         EyeLike in the input's type, then Cast
    Resize(axes), keep_aspect_ratio_policy the full-rank roi/scales/sizes; the policy's
                                           sizes where they are the common scale exactly
    Slice starts/ends beyond the axis      the importer narrows them to 32 bits (-2^62 became
                                           0): clamped to +-(dim + 1), as ONNX clamps them

Each rewrite keeps the node's outputs' names, names new nodes after the node, and runs once
shapes are static and attribute-like inputs constant (after frontend/fold.py); configurations
that cannot be rewritten are refused by frontend/support.py with the reason. semantics.py
holds the fixes of semantics, numerics.py those of precision, conversions.py the last three;
rewrite.py the context they share.
"""

from __future__ import annotations

import onnx

from vpuc.compiler.frontend.fixes import conversions, numerics, semantics
from vpuc.compiler.frontend.fixes.rewrite import Fixer, context

FIXERS: dict[str, Fixer] = {
    "LayerNormalization": semantics.layer_norm_stats,
    "IsInf": semantics.is_inf_flags,
    "SpaceToDepth": semantics.space_to_depth_crd,
    "BitShift": semantics.bit_shift_range,
    "Mod": semantics.float_mod_by_infinity,
    "Dropout": semantics.dropout_inference,
    "ConvTranspose": semantics.conv_transpose_output_shape,
    "Pow": semantics.pow_mixed_types,
    "Clip": semantics.clip_integer_bounds,
    "ReduceMax": numerics.extreme_reduction,
    "ReduceMin": numerics.extreme_reduction,
    "Softplus": numerics.softplus_precise,
    "Mish": numerics.mish_precise,
    "MatMul": numerics.float16_in_float32,
    "Gemm": numerics.float16_in_float32,
    "Conv": numerics.float16_in_float32,
    "Softmax": numerics.float16_in_float32,
    "EyeLike": conversions.eye_like_dtype,
    "Resize": conversions.resize_full_rank,
    "Slice": conversions.slice_bounds,
}


def fix_ops(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[tuple[str, str]]]:
    """The model with every known-wrong conversion rewritten; and (node, op) rewritten."""
    ctx = context(model)
    nodes, fixed = [], []
    for index, node in enumerate(model.graph.node):
        fixer = FIXERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        label = node.name or f"#{index}:{node.output[0]}"
        replacement = fixer(node, ctx, label) if fixer else None
        if replacement is None:
            nodes.append(node)
        else:
            nodes.extend(replacement)
            fixed.append((label, node.op_type))
    if not fixed:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(ctx.new_initializers)
    return out, fixed
