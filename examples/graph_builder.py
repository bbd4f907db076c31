"""A small helper for writing ONNX graphs by hand, used by the example model zoo.

Sits outside the compiler: `examples/zoo.py` and its model files build their test and
demo models with it. It keeps the node list, the initializers and a seeded random
generator together, so a model builder reads as a list of layers. Every node gets the
name it is given (reports print node names), and its output tensor is named after it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_OPSET = 17
# onnxruntime 1.32 loads IR versions up to 11; 9 is what onnx 1.23 writes for opset 17.
DEFAULT_IR_VERSION = 9


class GraphBuilder:
    """Collects nodes and initializers of one ONNX graph, with seeded random weights."""

    def __init__(self, graph_name: str, seed: int) -> None:
        self.graph_name = graph_name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._used_names: set[str] = set()

    # -- raw graph pieces -------------------------------------------------------------

    def _claim(self, name: str) -> str:
        if name in self._used_names:
            raise ValueError(f"name {name!r} is already used in graph {self.graph_name!r}")
        self._used_names.add(name)
        return name

    def constant(self, name: str, value: np.ndarray) -> str:
        """Adds an initializer and returns its tensor name."""
        self.initializers.append(numpy_helper.from_array(np.asarray(value), self._claim(name)))
        return name

    def op(
        self,
        op_type: str,
        inputs: list[str],
        name: str,
        output: str | None = None,
        **attributes: object,
    ) -> str:
        """Adds one node named `name`; its single output is `output` or `name` itself."""
        output_name = self._claim(output or name)
        node = helper.make_node(op_type, inputs, [output_name], name=name, **attributes)
        self.nodes.append(node)
        return output_name

    # -- seeded weights ---------------------------------------------------------------

    def he_weight(self, name: str, shape: tuple[int, ...], fan_in: int) -> str:
        """He-initialised float32 weight, so Relu stacks keep a steady activation scale."""
        scale = np.sqrt(2.0 / fan_in)
        return self.constant(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def small_bias(self, name: str, size: int) -> str:
        return self.constant(name, (self.rng.standard_normal(size) * 0.05).astype(np.float32))

    # -- layers -----------------------------------------------------------------------

    def conv(
        self,
        x: str,
        name: str,
        in_channels: int,
        out_channels: int,
        kernel: int = 3,
        stride: int = 1,
        group: int = 1,
        bias: bool = True,
    ) -> str:
        """Conv2d with 'same' padding for odd kernels; weights He-initialised."""
        fan_in = (in_channels // group) * kernel * kernel
        shape = (out_channels, in_channels // group, kernel, kernel)
        inputs = [x, self.he_weight(f"{name}.weight", shape, fan_in)]
        if bias:
            inputs.append(self.small_bias(f"{name}.bias", out_channels))
        pad = kernel // 2
        return self.op(
            "Conv",
            inputs,
            name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=group,
        )

    def batchnorm(self, x: str, name: str, channels: int) -> str:
        """Inference BatchNormalization with realistic statistics (var > 0, gamma ~ 1)."""
        rng = self.rng
        params = {
            "scale": rng.uniform(0.8, 1.2, channels),
            "bias": rng.normal(0.0, 0.1, channels),
            "mean": rng.normal(0.0, 0.1, channels),
            "var": rng.uniform(0.5, 1.5, channels),
        }
        inputs = [x] + [
            self.constant(f"{name}.{key}", value.astype(np.float32)) for key, value in params.items()
        ]
        return self.op("BatchNormalization", inputs, name, epsilon=1e-5)

    def conv_bn(
        self,
        x: str,
        prefix: str,
        in_channels: int,
        out_channels: int,
        kernel: int = 3,
        stride: int = 1,
        group: int = 1,
    ) -> str:
        """Conv (with bias) followed by BatchNormalization, named `<prefix>/conv`, `/bn`."""
        y = self.conv(x, f"{prefix}/conv", in_channels, out_channels, kernel, stride, group)
        return self.batchnorm(y, f"{prefix}/bn", out_channels)

    def gemm(self, x: str, name: str, in_features: int, out_features: int, output: str | None = None) -> str:
        """Fully connected layer as Gemm(transB=1), the way PyTorch exports nn.Linear."""
        weight = self.he_weight(f"{name}.weight", (out_features, in_features), in_features)
        bias = self.small_bias(f"{name}.bias", out_features)
        return self.op("Gemm", [x, weight, bias], name, output=output, transB=1)

    def global_pool_classifier(self, x: str, channels: int, classes: int, output: str = "logits") -> str:
        """GlobalAveragePool -> Flatten -> Gemm, the usual CNN head."""
        pooled = self.op("GlobalAveragePool", [x], "head/gap")
        flat = self.op("Flatten", [pooled], "head/flatten", axis=1)
        return self.gemm(flat, "head/fc", channels, classes, output=output)

    # -- finishing --------------------------------------------------------------------

    def model(
        self,
        inputs: dict[str, list[int]],
        outputs: dict[str, list[int]],
        opset: int = DEFAULT_OPSET,
        doc: str = "",
    ) -> onnx.ModelProto:
        """Wraps the graph in a float32 ModelProto and checks it."""
        graph = helper.make_graph(
            self.nodes,
            self.graph_name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
            initializer=self.initializers,
            doc_string=doc,
        )
        model = helper.make_model(
            graph, producer_name="vpuc.examples.zoo", opset_imports=[helper.make_opsetid("", opset)]
        )
        model.ir_version = DEFAULT_IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model
