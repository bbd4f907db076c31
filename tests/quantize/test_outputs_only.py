"""The sensitivity's and the floor's runs copy out only the model's outputs (observe.py
`outputs_only`; issue 23: ocr_cls's 172 sensitivity runs each copied 112 bindings it never
read). The quantisation must be the one whose every run copies everything: the same scales
and zero points, QDQ module, accuracy report, sensitivity and floor."""

from __future__ import annotations

import pytest
from quantize_testing import assert_same_quantisation

from vpuc.compiler.quantize import QuantOptions, quantize, synthetic_split
from vpuc.compiler.quantize.calibration import observe
from vpuc.targets import load_target


def _quantize(zoo_optimised, name: str, monkeypatch, honour: bool, options: QuantOptions) -> tuple:
    """quantize() with `outputs_only` honoured or ignored; the number of runs that used it."""
    mod, provenance, imported = zoo_optimised(name, "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    run = observe.Observer.run
    light = []

    def counted(self, inputs, converted=(), outputs_only=False, names=None):
        light.append(outputs_only)
        return run(self, inputs, converted, outputs_only and honour, names)

    monkeypatch.setattr(observe.Observer, "run", counted)
    result = quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration,
        held_out=split.held_out, options=options,
    )  # fmt: skip
    return result, sum(light)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("resnet_mini", QuantOptions()),
        # a floor of 50 dB: the search's passes too (3 layers kept in float, test_one_build.py)
        ("tinyconvnet", QuantOptions(min_sqnr_db=50.0)),
    ],
)
def test_outputs_only_runs_quantise_alike(zoo_optimised, monkeypatch, name, options):
    light, light_runs = _quantize(zoo_optimised, name, monkeypatch, True, options)
    full, _ = _quantize(zoo_optimised, name, monkeypatch, False, options)
    assert light_runs >= 4 * len(light.accuracy["sensitivity"])  # SENSITIVITY_SAMPLES per layer
    assert_same_quantisation(light, full)


def test_outputs_only_returns_the_outputs_and_no_bindings(zoo_optimised):
    mod, _, imported = zoo_optimised("tinyconvnet", "vpu")
    names = [b.var.name for b in mod["main"].body.blocks[0].bindings][:3]
    observer = observe.Observer(mod, names)
    sample = synthetic_split(imported.inputs, 2, seed=1).calibration
    full = next(observer.over(sample))
    light = next(observer.over(sample, outputs_only=True))
    assert light[1] == {} and set(full[1]) == set(names)
    assert len(light[0]) == len(full[0]) == len(imported.onnx_model.graph.output)
    for a, b in zip(light[0], full[0], strict=True):
        assert a.tobytes() == b.tobytes()
