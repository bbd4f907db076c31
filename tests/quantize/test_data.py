"""Calibration samples: the two sources, the held-out split, and every bad file a user can
bring (each a CalibrationError naming the file and the input)."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.frontend import TensorSpec
from vpuc.compiler.quantize import CalibrationError, load_calibration, split_file_samples, synthetic_split
from vpuc.compiler.quantize.calibration.data import MIN_SYNTHETIC_HELD_OUT

SPECS = [TensorSpec("input", (1, 3, 4, 4), "float32"), TensorSpec("mask", (1, 4), "int64")]


def _save(path, **arrays):
    np.savez(path, **arrays)
    return path


def _good(n=10):
    rng = np.random.default_rng(0)
    return {
        "input": rng.standard_normal((n, 1, 3, 4, 4)).astype(np.float32),
        "mask": np.ones((n, 1, 4), np.int64),
    }


def test_loads_a_stack_in_either_form(tmp_path):
    data = load_calibration(_save(tmp_path / "a.npz", **_good()), SPECS)
    assert data.count == 10 and data.samples["input"].shape == (10, 1, 3, 4, 4)
    batch = {"input": _good()["input"][:, 0], "mask": _good()["mask"][:, 0]}  # (N, *shape[1:])
    assert load_calibration(_save(tmp_path / "b.npz", **batch), SPECS).samples["input"].shape == (
        10,
        1,
        3,
        4,
        4,
    )


def test_file_split_holds_out_the_last_fifth(tmp_path):
    split = split_file_samples(load_calibration(_save(tmp_path / "a.npz", **_good(10)), SPECS))
    assert (split.calibration.count, split.held_out.count) == (8, 2) and not split.warnings
    assert np.array_equal(split.held_out.samples["input"], _good(10)["input"][8:])


def test_single_sample_file_is_used_for_both_with_a_warning(tmp_path):
    split = split_file_samples(load_calibration(_save(tmp_path / "a.npz", **_good(1)), SPECS))
    assert split.calibration.count == split.held_out.count == 1 and "one sample" in split.warnings[0]


def test_synthetic_split_is_seeded_and_disjoint():
    first, again = synthetic_split(SPECS, 32, seed=3), synthetic_split(SPECS, 32, seed=3)
    assert np.array_equal(first.calibration.samples["input"], again.calibration.samples["input"])
    assert first.held_out.count == max(MIN_SYNTHETIC_HELD_OUT, 8)
    assert not np.isin(first.held_out.samples["input"], first.calibration.samples["input"]).any()
    assert "synthetic" in first.warnings[0]
    masks = first.held_out.samples["mask"]  # an integer input no Gather reads: padding masks
    assert set(np.unique(masks)) <= {0, 1} and masks[..., 0].all()
    lengths = masks.sum(axis=-1)
    assert np.array_equal(masks, np.arange(masks.shape[-1]) < lengths[..., None])


def test_synthetic_token_ids_stay_inside_the_gather_tables():
    """The sentence encoder's ids index a 2048-row word table and a 2-row type table; its
    mask is a padding mask. Ids are spread over the table (not all 0, as they once were)."""
    from vpuc.compiler.frontend import import_model
    from vpuc.compiler.quantize.calibration.data import gather_table_sizes, synthetic_calibration
    from vpuc.examples import sentence_encoder

    imported = import_model(sentence_encoder.sentence_encoder(layers=1))
    assert gather_table_sizes(imported.onnx_model) == {"input_ids": 2048, "token_type_ids": 2}
    data = synthetic_calibration(imported.inputs, 16, seed=0, onnx_model=imported.onnx_model)
    ids, types, mask = (data.samples[n] for n in ("input_ids", "token_type_ids", "attention_mask"))
    assert ids.min() >= 0 and ids.max() < 2048 and len(np.unique(ids)) > 400
    assert set(np.unique(types)) == {0, 1} and set(np.unique(mask)) == {0, 1} and mask[..., 0].all()
    assert ids.dtype == np.int64 and data.synthetic


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"input": _good()["input"]}, "no samples for input 'mask' (the file holds: input)"),
        (
            {**_good(), "extra": np.zeros(3)},
            "array 'extra' is not an input of the model (inputs: input, mask)",
        ),
        (
            {**_good(), "input": _good()["input"].astype(np.float64)},
            "input 'input' is float64, the model expects float32 (convert with .astype)",
        ),
        (
            {**_good(), "input": _good()["input"][:, :, :, :3]},
            "input 'input' has shape (10, 1, 3, 3, 4); expected (N, 1, 3, 4, 4) or (N, 3, 4, 4)",
        ),
        ({"input": _good()["input"][:0], "mask": _good()["mask"][:0]}, "input 'input' holds 0 samples"),
        ({**_good(), "mask": _good(7)["mask"]}, "inputs have different sample counts (input=10, mask=7)"),
        (
            {
                **_good(),
                "input": np.where(
                    np.arange(480).reshape(10, 1, 3, 4, 4) == 100, np.nan, _good()["input"]
                ).astype(np.float32),
            },
            "input 'input' sample 2 contains NaN",
        ),
        (
            {**_good(), "input": np.full((10, 1, 3, 4, 4), np.inf, np.float32)},
            "input 'input' sample 0 contains Inf",
        ),
    ],
    ids=["missing input", "unknown array", "dtype", "shape", "no samples", "counts differ", "nan", "inf"],
)
def test_bad_files_name_the_file_and_the_input(tmp_path, arrays, message):
    path = _save(tmp_path / "calib.npz", **arrays)
    with pytest.raises(CalibrationError) as error:
        load_calibration(path, SPECS)
    assert str(error.value) == f"{path}: {message}"


def test_missing_empty_and_foreign_files(tmp_path):
    with pytest.raises(CalibrationError, match="calibration file does not exist"):
        load_calibration(tmp_path / "nope.npz", SPECS)
    with pytest.raises(CalibrationError, match="the file holds no arrays"):
        load_calibration(_save(tmp_path / "empty.npz"), SPECS)
    (tmp_path / "text.npz").write_text("not numpy")
    with pytest.raises(CalibrationError, match="not a readable NumPy .npz file"):
        load_calibration(tmp_path / "text.npz", SPECS)
    np.save(tmp_path / "single.npy", np.zeros(3))
    with pytest.raises(CalibrationError, match="got a single array"):
        load_calibration(tmp_path / "single.npy", SPECS)
    (tmp_path / "zero.npz").write_bytes(b"")
    with pytest.raises(CalibrationError, match="not a readable"):
        load_calibration(tmp_path / "zero.npz", SPECS)
