"""Model inputs for `vpuc run`: read from .npz and checked against the artifact, or
generated from a seed.

Random inputs: float tensors are standard normal (numpy's default_rng(seed)); integer
tensors that index a table (the manifest's `index_range` n: Gather indices) uniform in
[0, n), int8 and uint8 tensors (a quantised model's own inputs) over their whole range,
other integer tensors uniform in [0, 10); bool tensors fair coin flips. Inputs are drawn in
manifest order so the same seed gives the same arrays on every machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vpuc.runtime.errors import InputError


def random_inputs(specs: list[dict[str, Any]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in specs:
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if dtype.kind == "f":
            arrays[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            low, high = _integer_range(spec, dtype)
            arrays[spec["name"]] = rng.integers(low, high, size=shape).astype(dtype)
        elif dtype.kind == "b":
            arrays[spec["name"]] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise InputError(f"input '{spec['name']}': cannot generate random {dtype.name} data")
    return arrays


def _integer_range(spec: dict[str, Any], dtype: np.dtype) -> tuple[int, int]:
    """[low, high) for random integers of this input."""
    if spec.get("index_range"):
        return 0, int(spec["index_range"])
    if dtype.itemsize == 1:
        info = np.iinfo(dtype)
        return int(info.min), int(info.max) + 1
    return 0, 10


def check_index_ranges(specs: list[dict[str, Any]], arrays: dict[str, np.ndarray], source: str) -> None:
    """Indices outside their table ([-n, n)) are refused: compiled code would read past it."""
    for spec in specs:
        bound, array = spec.get("index_range"), arrays.get(spec["name"])
        if not bound or array is None:
            continue
        outside = int(np.count_nonzero((array < -bound) | (array >= bound)))
        if outside:
            raise InputError(
                f"{source}: input '{spec['name']}': {outside} of {array.size} values are outside "
                f"[-{bound}, {bound}), the table they index (largest {int(np.abs(array).max())})"
            )


def nonfinite_counts(outputs: dict[str, np.ndarray]) -> dict[str, int]:
    """{output name: count of NaN/Inf values} for the outputs that have any."""
    counts = {}
    for name, array in outputs.items():
        if array.dtype.kind in "fc":
            bad = int(np.count_nonzero(~np.isfinite(array)))
            if bad:
                counts[name] = bad
    return counts


NPZ_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz is a zip of .npy files (or empty)
NPY_MAGIC = b"\x93NUMPY"


def load_npz(path: str | Path, specs: list[dict[str, Any]] | None = None) -> dict[str, np.ndarray]:
    """Arrays by input name from an .npz (numpy.savez); a .npy (numpy.save) is accepted for a
    model with one input (`specs`, the artifact's inputs, tell)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    with open(path, "rb") as raw:
        magic = raw.read(6)
    if magic.startswith(NPY_MAGIC):
        return _load_npy(path, specs)
    if not magic.startswith(NPZ_MAGICS):
        raise InputError(
            f"{path}: not an .npz file (expected a zip of arrays as numpy.savez writes, one per input name)"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npz file ({_reason(exc)})") from None
    except Exception as exc:  # zipfile raises BadZipFile, NotImplementedError, ...
        raise InputError(f"{path}: not a readable .npz file ({_reason(exc)})") from None


def _load_npy(path: Path, specs: list[dict[str, Any]] | None) -> dict[str, np.ndarray]:
    names = [spec["name"] for spec in specs or []]
    if len(names) != 1:
        raise InputError(
            f"{path}: a .npy file holds one array, the model has {len(names)} inputs "
            f"({', '.join(names)}); give an .npz with one array per input name (numpy.savez)"
        )
    try:
        return {names[0]: np.load(path, allow_pickle=False)}
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy file ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if "pickle" in text:
        return "it holds Python objects (pickles), which vpuc does not load; save plain arrays"
    return text or type(exc).__name__


def drop_bound_inputs(
    arrays: dict[str, np.ndarray], bound: dict[str, np.ndarray], source: str
) -> dict[str, np.ndarray]:
    """An input file may still hold an input that --bind-input made a constant (the file
    the model was checked with before): accepted when it holds the bound value, which the
    artifact computes with; any other value is refused, since the artifact cannot use it."""
    kept = dict(arrays)
    for name, value in bound.items():
        if name not in kept:
            continue
        given = np.asarray(kept.pop(name))
        if given.shape != value.shape or not np.array_equal(given, value):
            first = value.reshape(-1)[0] if value.size else None
            shown = first if first is not None and np.all(value == first) else "its value"
            raise InputError(
                f"{source}: input '{name}' was bound at compile time (--bind-input {name}={shown}): "
                "this artifact computes with that value only; drop it from the file or compile again"
            )
    return kept


def check_inputs(
    specs: list[dict[str, Any]], arrays: dict[str, np.ndarray], source: str
) -> dict[str, np.ndarray]:
    """Every input present with its exact shape and dtype; no unknown names."""
    names = [spec["name"] for spec in specs]
    for name in arrays:
        if name not in names:
            raise InputError(f"{source}: '{name}' is not an input of the model (inputs: {', '.join(names)})")
    checked = {}
    for spec in specs:
        name, shape, dtype = spec["name"], tuple(spec["shape"]), np.dtype(spec["dtype"])
        if name not in arrays:
            raise InputError(f"{source}: input '{name}' is missing")
        array = _from_raw(np.asarray(arrays[name]), dtype)
        if array.shape != shape:
            raise InputError(
                f"{source}: input '{name}' has shape {list(array.shape)}, expected {list(shape)}"
            )
        if array.dtype != dtype:
            raise InputError(f"{source}: input '{name}' has dtype {array.dtype.name}, expected {dtype.name}")
        checked[name] = np.require(array, requirements="C")  # keeps 0-d arrays 0-d
    return checked


def _from_raw(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """An .npy file has no code for ml_dtypes types (bfloat16, float8_*): numpy.savez stores
    them as raw bytes (void). Raw bytes of the expected width are read as the expected type."""
    if array.dtype.kind == "V" and dtype.kind == "V" and array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    return array


def save_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """Write outputs atomically (temporary file, then rename). Arrays of ml_dtypes types are
    stored as raw bytes (void of the same width; `array.view(ml_dtypes.bfloat16)` reads them
    back): numpy cannot load the type codes it would write for them."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.npz")
    raw = {name: a.view(f"V{a.dtype.itemsize}") if a.dtype.kind == "V" else a for name, a in arrays.items()}
    try:
        np.savez(tmp, **raw)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{path}: cannot write: {exc.strerror}") from None
