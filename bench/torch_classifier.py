"""A PyTorch export of a ~10 MB image classifier for the compile-time bench (issue 23: "a 10 MB
classifier <= 20 s on --target vpu"): MobileNetV2 (width 1.0, 224x224, 1000 classes; 3.5M
parameters, 14 MB of float32 weights), written in plain torch.nn (torchvision's wheel does not
import beside the CPU torch this machine has) with the published structure: a 3x3 stride-2
stem, 17 inverted residuals (1x1 expand, 3x3 depthwise, 1x1 project, ReLU6, residual adds
where the shape allows), a 1x1 to 1280, global average pool, a linear classifier.

The weights are seeded random (torch's default init, BatchNorm with random statistics) and
exported in eval mode by torch.onnx.export (TorchScript exporter, opset 17), so BatchNorm is
folded as PyTorch exports it and the graph is what a user's export looks like; compile time
and placement are what it measures, not accuracy. PyTorch is a bench-only dependency:

    python3 -m venv bench/.venv-torch
    bench/.venv-torch/bin/pip install torch==2.13.0 onnx==1.23.2
    bench/.venv-torch/bin/python bench/torch_classifier.py bench/out/vision   # mobilenetv2_224.onnx
"""

from __future__ import annotations

import sys
from pathlib import Path

SETUP = "python3 -m venv bench/.venv-torch && bench/.venv-torch/bin/pip install torch==2.13.0 onnx==1.23.2"

try:
    import torch
    from torch import nn
except ImportError:  # bench/run_all.py runs every bench script in the `bench` extra's venv: no torch
    if __name__ != "__main__":
        raise
    print(
        f"bench/torch_classifier.py: skipped, torch is not installed here; it runs in a venv of its own: "
        f"{SETUP}, then bench/.venv-torch/bin/python bench/torch_classifier.py OUT_DIR",
        file=sys.stderr,
    )
    sys.exit(0)

# (expansion t, output channels c, repeats n, first stride s): the MobileNetV2 paper's table 2
SETTINGS = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def _conv_bn(
    c_in: int, c_out: int, kernel: int, stride: int, groups: int = 1, relu: bool = True
) -> nn.Sequential:
    layers = [
        nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    return nn.Sequential(*layers, nn.ReLU6()) if relu else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = c_in * expand
        layers = [_conv_bn(c_in, hidden, 1, 1)] if expand != 1 else []
        layers += [
            _conv_bn(hidden, hidden, 3, stride, groups=hidden),
            _conv_bn(hidden, c_out, 1, 1, relu=False),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers, c_in = [_conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(c_in, c, s if i == 0 else 1, t))
                c_in = c
        layers.append(_conv_bn(c_in, 1280, 1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def mobilenetv2(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = MobileNetV2()
    for module in model.modules():  # random statistics, so BatchNorm's fold is not the identity
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model.eval()


def write(out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "mobilenetv2_224.onnx"
    model = mobilenetv2()
    params = sum(p.numel() for p in model.parameters())
    example = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, (example,), str(path), input_names=["input"], output_names=["logits"],
                      opset_version=17, dynamo=False)  # fmt: skip
    print(f"{path}: MobileNetV2 224x224, {params:,} parameters, {path.stat().st_size / 1e6:.1f} MB")
    return path


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "out" / "vision")
