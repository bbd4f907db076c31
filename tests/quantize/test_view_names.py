"""The one build's two views copy out only the tensors their readers read (one_build.py):
the float view (calibration, the rewrites' statistics, the accuracy report's reference) the
float tensors, the QDQ view (the accuracy report's probes) the quantised ones. The readers
must see the same values as with every exposed tensor copied out (the path before): ranges
and parameters, the QDQ module, the accuracy report and the sensitivity the same bits; and
the views must really copy less (else the comparison compares the path with itself)."""

from __future__ import annotations

import pytest
from quantize_testing import assert_same_quantisation

from vpuc.compiler.quantize import QuantOptions, quantize, synthetic_split
from vpuc.compiler.quantize.calibration import observe
from vpuc.targets import load_target

_RUN = observe.Observer.run  # before any test wraps it


def _quantize(zoo_optimised, name: str, every_tensor: bool, monkeypatch, options: QuantOptions):
    """quantize() with each run's copied tensors recorded; `every_tensor`: the runs copy
    every exposed tensor whatever the view asks."""
    mod, provenance, imported = zoo_optimised(name, "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    copied: list[tuple[int, int]] = []  # (tensors copied, tensors exposed) per run

    def recording_run(self, inputs, converted=(), outputs_only=False, names=None):
        outputs, values = _RUN(self, inputs, converted, outputs_only, None if every_tensor else names)
        copied.append((len(values), len(self.names)))
        return outputs, values

    monkeypatch.setattr(observe.Observer, "run", recording_run)
    result = quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration,
        held_out=split.held_out, options=options,
    )  # fmt: skip
    return result, copied


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("resnet_mini", QuantOptions()),
        # the method choice reads the float view too; a 50 dB floor re-measures the final plan
        ("tinyconvnet", QuantOptions(min_sqnr_db=50.0)),
    ],
    ids=["resnet_mini", "tinyconvnet-floor"],
)
def test_views_copy_their_tensors_only(zoo_optimised, monkeypatch, name, options):
    every, every_copied = _quantize(zoo_optimised, name, True, monkeypatch, options)
    views, views_copied = _quantize(zoo_optimised, name, False, monkeypatch, options)
    assert_same_quantisation(views, every)
    assert len(views_copied) == len(every_copied)
    calibration = views_copied[:32]  # the float view's runs over the 32 calibration samples
    assert all(0 < copied < exposed for copied, exposed in calibration)
    assert sum(c for c, _ in views_copied) < sum(c for c, _ in every_copied)


def test_method_choice_reads_the_float_view(zoo_optimised, monkeypatch):
    """`auto` reads every calibrated tensor again from the float view."""
    options = QuantOptions()
    mod, provenance, imported = zoo_optimised("tinyconvnet", "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    auto = quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration,
        held_out=split.held_out, options=options, method="auto",
    )  # fmt: skip
    monkeypatch.setattr(
        observe.Observer, "run", lambda self, i, c=(), o=False, names=None: _RUN(self, i, c, o, None)
    )
    every = quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration,
        held_out=split.held_out, options=options, method="auto",
    )  # fmt: skip
    assert_same_quantisation(auto, every)
