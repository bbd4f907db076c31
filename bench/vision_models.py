"""YOLO-class detectors for the compile-time bench (issue 23's public vision exports), built
with onnx.helper and seeded random weights: the public checkpoints are not on the machine
and there is no network for model zoos. The structure follows the published architectures
as their ONNX exports show it; the weights are random (float32, He-scaled, BatchNorm with
random statistics), so compile time and placement are what they measure, not accuracy.

    yolov8n(320)  Ultralytics YOLOv8n (width 0.25, depth 0.33): Conv = Conv2d + BatchNorm +
                  SiLU (Sigmoid * x); C2f blocks (1x1, Split, n Bottlenecks, Concat, 1x1);
                  SPPF (three chained 5x5 MaxPools); FPN + PAN neck (Resize x2 + Concat);
                  decoupled heads per level (box: 2 Conv 3x3 + 1x1 to 4*16, cls: 2 Conv 3x3 +
                  1x1 to 80), then the export's decode: DFL (softmax over 16 bins, a 1x1 conv
                  with weights 0..15), dist2bbox against the anchor points, x stride, cls
                  Sigmoid -> (1, 84, anchors). 3.2M parameters (the published 3.2M).
    yolox_s(416)  YOLOX-s (width 0.5, depth 0.33): Focus (four strided Slices + Concat),
                  CSPDarknet (CSP layers: two 1x1 branches, n Bottlenecks, Concat, 1x1),
                  SPP (5/9/13 MaxPools), PAFPN, decoupled heads (1x1 stem, 2 Conv 3x3 per
                  branch; reg 4, obj 1, cls 80) -> (1, anchors, 85). 9.0M parameters.

    python bench/vision_models.py OUT_DIR      writes yolov8n_320.onnx and yolox_s_416.onnx
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
CLASSES = 80
REG_MAX = 16  # YOLOv8's DFL bins per box side


class Graph:
    """Nodes and initializers, with fresh names; each layer method returns its output name."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0
        self.params = 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}_{self.count}"

    def const(self, value: np.ndarray, kind: str = "c") -> str:
        name = self.name(kind)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, value: np.ndarray) -> str:
        self.params += value.size
        return self.const(value.astype(np.float32), "w")

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs) -> str | list[str]:
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=names[0], **attrs))
        return names[0] if outputs == 1 else names

    def conv2d(self, x: str, c_in: int, c_out: int, k: int, s: int = 1, bias: bool = False) -> str:
        fan_in = c_in * k * k
        w = self.rng.standard_normal((c_out, c_in, k, k)) * np.sqrt(2.0 / fan_in)
        inputs = [x, self.weight(w)]
        if bias:
            inputs.append(self.weight(self.rng.standard_normal(c_out) * 0.1))
        pad = k // 2
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)

    def conv(self, x: str, c_in: int, c_out: int, k: int = 1, s: int = 1) -> str:
        """Conv2d (no bias) + BatchNorm + SiLU, as both families' exports before BN folding."""
        y = self.conv2d(x, c_in, c_out, k, s)
        gamma = 1.0 + 0.1 * self.rng.standard_normal(c_out)
        beta = 0.1 * self.rng.standard_normal(c_out)
        mean = 0.1 * self.rng.standard_normal(c_out)
        var = 1.0 + 0.5 * self.rng.random(c_out)
        stats = [self.weight(v) for v in (gamma, beta, mean, var)]
        y = self.op("BatchNormalization", [y, *stats], epsilon=1e-3)
        return self.silu(y)

    def silu(self, x: str) -> str:
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def split(self, x: str, sizes: list[int], axis: int = 1) -> list[str]:
        sizes_name = self.const(np.array(sizes, np.int64))
        return self.op("Split", [x, sizes_name], outputs=len(sizes), axis=axis)

    def concat(self, xs: list[str], axis: int = 1) -> str:
        return self.op("Concat", xs, axis=axis)

    def maxpool(self, x: str, k: int) -> str:
        return self.op("MaxPool", [x], kernel_shape=[k, k], strides=[1, 1], pads=[k // 2] * 4)

    def upsample(self, x: str) -> str:
        scales = self.const(np.array([1, 1, 2, 2], np.float32))
        return self.op("Resize", [x, "", scales], mode="nearest")

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64))])

    def model(self, name: str, image: str, size: int, output: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(image, TensorProto.FLOAT, [1, 3, size, size])],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
            self.inits,
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        return onnx.shape_inference.infer_shapes(model)


# --- YOLOv8n -------------------------------------------------------------------------


def _bottleneck(g: Graph, x: str, c: int, shortcut: bool, k1: int) -> str:
    y = g.conv(g.conv(x, c, c, k1), c, c, 3)
    return g.op("Add", [x, y]) if shortcut else y


def _c2f(g: Graph, x: str, c_in: int, c_out: int, n: int, shortcut: bool) -> str:
    c = c_out // 2
    parts = g.split(g.conv(x, c_in, 2 * c, 1), [c, c])
    for _ in range(n):
        parts.append(_bottleneck(g, parts[-1], c, shortcut, 3))
    return g.conv(g.concat(parts), (2 + n) * c, c_out, 1)


def _sppf(g: Graph, x: str, c_in: int, c_out: int) -> str:
    y = [g.conv(x, c_in, c_in // 2, 1)]
    for _ in range(3):
        y.append(g.maxpool(y[-1], 5))
    return g.conv(g.concat(y), 2 * c_in, c_out, 1)


def _anchors(size: int, strides: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(anchor centres (1, 2, A), their strides (1, 1, A)), level by level, row-major."""
    points, scale = [], []
    for stride in strides:
        n = size // stride
        ys, xs = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        points.append(np.stack([xs.ravel(), ys.ravel()]))
        scale.append(np.full(n * n, stride))
    centres, strides = np.concatenate(points, 1)[None], np.concatenate(scale)[None, None]
    return centres.astype(np.float32), strides.astype(np.float32)


def yolov8n(size: int = 320, seed: int = 0) -> onnx.ModelProto:
    g = Graph(seed)
    x = g.conv("images", 3, 16, 3, 2)
    x = _c2f(g, g.conv(x, 16, 32, 3, 2), 32, 32, 1, True)
    p3 = _c2f(g, g.conv(x, 32, 64, 3, 2), 64, 64, 2, True)
    p4 = _c2f(g, g.conv(p3, 64, 128, 3, 2), 128, 128, 2, True)
    p5 = _sppf(g, _c2f(g, g.conv(p4, 128, 256, 3, 2), 256, 256, 1, True), 256, 256)
    n4 = _c2f(g, g.concat([g.upsample(p5), p4]), 384, 128, 1, False)
    n3 = _c2f(g, g.concat([g.upsample(n4), p3]), 192, 64, 1, False)
    m4 = _c2f(g, g.concat([g.conv(n3, 64, 64, 3, 2), n4]), 192, 128, 1, False)
    m5 = _c2f(g, g.concat([g.conv(m4, 128, 128, 3, 2), p5]), 384, 256, 1, False)
    box_c, cls_c = max(16, 64 // 4, REG_MAX * 4), max(64, min(CLASSES, 100))
    levels = []
    for feature, c in ((n3, 64), (m4, 128), (m5, 256)):
        box = g.conv2d(
            g.conv(g.conv(feature, c, box_c, 3), box_c, box_c, 3), box_c, 4 * REG_MAX, 1, bias=True
        )
        cls = g.conv2d(g.conv(g.conv(feature, c, cls_c, 3), cls_c, cls_c, 3), cls_c, CLASSES, 1, bias=True)
        levels.append(g.reshape(g.concat([box, cls]), [1, 4 * REG_MAX + CLASSES, -1]))
    box, cls = g.split(g.concat(levels, 2), [4 * REG_MAX, CLASSES])
    anchors, strides = _anchors(size, [8, 16, 32])
    bins = g.op("Transpose", [g.reshape(box, [1, 4, REG_MAX, -1])], perm=[0, 2, 1, 3])
    bins = g.op("Softmax", [bins], axis=1)
    dfl = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    dist = g.reshape(g.op("Conv", [bins, g.const(dfl)], kernel_shape=[1, 1]), [1, 4, -1])
    lt, rb = g.split(dist, [2, 2])
    points = g.const(anchors)
    x1y1, x2y2 = g.op("Sub", [points, lt]), g.op("Add", [points, rb])
    centre = g.op("Div", [g.op("Add", [x1y1, x2y2]), g.const(np.array(2.0, np.float32))])
    boxes = g.op("Mul", [g.concat([centre, g.op("Sub", [x2y2, x1y1])]), g.const(strides)])
    out = g.concat([boxes, g.op("Sigmoid", [cls])])
    return g.model("yolov8n", "images", size, out)


# --- YOLOX-s -------------------------------------------------------------------------


def _csp(g: Graph, x: str, c_in: int, c_out: int, n: int, shortcut: bool = True) -> str:
    hidden = c_out // 2
    a = g.conv(x, c_in, hidden, 1)
    b = g.conv(x, c_in, hidden, 1)
    for _ in range(n):
        a = _bottleneck(g, a, hidden, shortcut, 1)
    return g.conv(g.concat([a, b]), 2 * hidden, c_out, 1)


def _focus(g: Graph, x: str) -> str:
    """Space to depth by four strided Slices (YOLOX's Focus), then a 3x3 conv."""
    patches = []
    for top, left in ((0, 0), (1, 0), (0, 1), (1, 1)):
        starts, ends = g.const(np.array([top, left], np.int64)), g.const(np.array([1 << 30] * 2, np.int64))
        axes, steps = g.const(np.array([2, 3], np.int64)), g.const(np.array([2, 2], np.int64))
        patches.append(g.op("Slice", [x, starts, ends, axes, steps]))
    return g.conv(g.concat(patches), 12, 32, 3)


def yolox_s(size: int = 416, seed: int = 0) -> onnx.ModelProto:
    g = Graph(seed)
    x = _focus(g, "images")
    x = _csp(g, g.conv(x, 32, 64, 3, 2), 64, 64, 1)
    d3 = _csp(g, g.conv(x, 64, 128, 3, 2), 128, 128, 3)
    d4 = _csp(g, g.conv(d3, 128, 256, 3, 2), 256, 256, 3)
    x = g.conv(g.conv(d4, 256, 512, 3, 2), 512, 256, 1)  # dark5: conv, then SPP's 1x1
    x = g.conv(g.concat([x, *(g.maxpool(x, k) for k in (5, 9, 13))]), 1024, 512, 1)
    d5 = _csp(g, x, 512, 512, 1, shortcut=False)
    lateral = g.conv(d5, 512, 256, 1)
    f4 = _csp(g, g.concat([g.upsample(lateral), d4]), 512, 256, 1, False)
    reduced = g.conv(f4, 256, 128, 1)
    p3 = _csp(g, g.concat([g.upsample(reduced), d3]), 256, 128, 1, False)
    p4 = _csp(g, g.concat([g.conv(p3, 128, 128, 3, 2), reduced]), 256, 256, 1, False)
    p5 = _csp(g, g.concat([g.conv(p4, 256, 256, 3, 2), lateral]), 512, 512, 1, False)
    levels = []
    for feature, c in ((p3, 128), (p4, 256), (p5, 512)):
        stem = g.conv(feature, c, 128, 1)
        cls = g.conv(g.conv(stem, 128, 128, 3), 128, 128, 3)
        reg = g.conv(g.conv(stem, 128, 128, 3), 128, 128, 3)
        out = [g.conv2d(reg, 128, 4, 1, bias=True), g.op("Sigmoid", [g.conv2d(reg, 128, 1, 1, bias=True)])]
        out.append(g.op("Sigmoid", [g.conv2d(cls, 128, CLASSES, 1, bias=True)]))
        levels.append(g.reshape(g.concat(out), [1, 5 + CLASSES, -1]))
    out = g.op("Transpose", [g.concat(levels, 2)], perm=[0, 2, 1])
    return g.model("yolox_s", "images", size, out)


MODELS = {"yolov8n_320": (yolov8n, 320), "yolox_s_416": (yolox_s, 416)}


def write(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (build, size) in MODELS.items():
        path = out_dir / f"{name}.onnx"
        onnx.save(build(size), path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/out/vision")):
        print(written)
