"""Observer.over runs the next sample on a worker thread while the caller reads this one
(calibration/observe.py, issue 23). The caller still sees every sample's values in order,
so ranges and parameters, the QDQ module, the accuracy report and the sensitivity must be
the same bits as with the samples run one after the other (observe.AHEAD = False, the path
before); and the thread must really run them."""

from __future__ import annotations

import threading

import pytest
from quantize_testing import assert_same_quantisation

from vpuc.compiler.quantize import quantize, synthetic_split
from vpuc.compiler.quantize.calibration import observe
from vpuc.targets import load_target

_RUN = observe.Observer.run  # before any test wraps it


def _quantize(zoo_optimised, name: str, ahead: bool, monkeypatch):
    mod, provenance, imported = zoo_optimised(name, "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    monkeypatch.setattr(observe, "AHEAD", ahead)
    threads: list[str] = []

    def recording_run(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return _RUN(self, *args, **kwargs)

    monkeypatch.setattr(observe.Observer, "run", recording_run)
    result = quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration, held_out=split.held_out
    )
    return result, threads


@pytest.mark.parametrize("name", ["tinyconvnet", "resnet_mini"])
def test_runs_ahead_quantise_as_one_after_the_other(zoo_optimised, monkeypatch, name):
    serial, serial_threads = _quantize(zoo_optimised, name, False, monkeypatch)
    ahead, ahead_threads = _quantize(zoo_optimised, name, True, monkeypatch)
    assert set(serial_threads) == {"MainThread"}
    assert len(ahead_threads) == len(serial_threads) and "MainThread" not in ahead_threads
    assert_same_quantisation(ahead, serial)
