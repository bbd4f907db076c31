"""Small ONNX models and runners for the tests of the quantiser's methods (equalisation,
bias absorption, SmoothQuant): a depthwise-separable block with relu, and running a Relax
module or an ONNX model on the same feeds."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from vpuc.compiler import compat
from vpuc.examples.graph_builder import GraphBuilder


def depthwise_separable_relu() -> onnx.ModelProto:
    """stem conv-bn-relu -> depthwise 3x3 conv-bn-relu -> pointwise 1x1 conv-bn-relu ->
    pointwise 1x1 conv -> head: MobileNet-v1's block with relu (as MLPerf Tiny's DS-CNN has
    it), with per-channel weight ranges spread over two orders of magnitude the way BatchNorm
    folding leaves depthwise convs."""
    g = GraphBuilder("ds_relu", seed=7)
    x = g.conv_bn("input", "stem", 3, 16)
    x = g.op("Relu", [x], "stem/relu")
    x = g.conv_bn(x, "dw", 16, 16, kernel=3, group=16)
    x = g.op("Relu", [x], "dw/relu")
    x = g.conv_bn(x, "pw", 16, 32, kernel=1)
    x = g.op("Relu", [x], "pw/relu")
    x = g.conv(x, "pw2", 32, 32, kernel=1)
    g.global_pool_classifier(x, channels=32, classes=10)
    spread = np.geomspace(0.05, 5.0, 16).astype(np.float32)
    for tensor in g.initializers:
        if tensor.name in ("stem/conv.weight", "dw/conv.weight"):
            array = onnx.numpy_helper.to_array(tensor) * spread[:, None, None, None]
            tensor.CopyFrom(onnx.numpy_helper.from_array(array.astype(np.float32), tensor.name))
    return g.model({"input": [1, 3, 16, 16]}, {"logits": [1, 10]})


def run_relax(mod, feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    """The first output of `mod` (built for the host) on every feed, stacked."""
    vm = compat.virtual_machine(compat.build_host(mod, "llvm"))
    return np.stack(
        [compat.flatten_outputs(vm["main"](*[compat.to_tvm(v) for v in f.values()]))[0] for f in feeds]
    )


def run_onnx(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.stack([session.run(None, f)[0] for f in feeds])
