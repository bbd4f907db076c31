"""Calibration samples: where they come from, how they are checked, and which are held out.

The quantiser's first input (compiler/quantize, before calibration). Two sources:

    --calib X.npz          one array per model input, a stack of N samples: shape
                           (N, *input_shape), or (N, *input_shape[1:]) when the input's
                           batch dim is 1 (a batch of N single samples)
    --calib-synthetic N    seeded random samples (SYNTHETIC_DISTRIBUTION); accuracy figures
                           then say how the quantised model tracks the float one on noise,
                           not on the user's data, so a warning says so

Held-out samples (for the accuracy report, never used to calibrate): from a file, the last
HELD_OUT_FRACTION of its samples (at least one; a one-sample file is used for both, with a
warning); for synthetic data, max(MIN_SYNTHETIC_HELD_OUT, N // 4) fresh samples drawn from
a second, independent stream of the same seed. `--held-out K` sets the count instead (the
last K of a file's samples, or K fresh synthetic ones). Synthetic float samples are drawn
when read, one at a time (drawn.py): memory holds one sample of each input, whatever N.
"""

from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from vpuc.compiler.errors import first_line
from vpuc.compiler.frontend.shapes import TensorSpec
from vpuc.compiler.quantize.calibration.drawn import DrawnStack
from vpuc.compiler.quantize.errors import CalibrationError

SYNTHETIC_DISTRIBUTION = (
    "float inputs ~ N(0, 1) i.i.d. per element; integer inputs that index a Gather uniform "
    "below its table size; other integer and bool inputs padding masks (1 on a random prefix "
    "of the last axis, at least one element, 0 after)"
)
INDEX_PASSTHROUGH = ("Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand")
HELD_OUT_FRACTION = 0.2
MIN_SYNTHETIC_HELD_OUT = 8
DEFAULT_SYNTHETIC_SAMPLES = 32
SYNTHETIC_WARNING = (
    "calibrating on synthetic data ({what}): the accuracy figures measure the quantised model "
    "against the float one on random inputs, not on your data; give --calib X.npz for figures "
    "that mean something"
)


@dataclass(frozen=True)
class CalibrationData:
    """N samples of every model input: `samples[name]` has shape (N, *input_shape); a synthetic
    float input's is a DrawnStack (drawn.py), which holds one sample and draws it when read."""

    samples: dict[str, np.ndarray]
    source: str  # a file path, or "synthetic (N=.., seed=..)"
    synthetic: bool = False

    @property
    def count(self) -> int:
        return next(iter(self.samples.values())).shape[0] if self.samples else 0

    def sample(self, index: int) -> dict[str, np.ndarray]:
        # [index, ...]: an ndarray even for a 0-d input (stack[index] would be a numpy scalar)
        return {name: stack[index, ...] for name, stack in self.samples.items()}

    def subset(self, indices: range, source: str) -> CalibrationData:
        return CalibrationData(
            {n: s[indices.start : indices.stop] for n, s in self.samples.items()}, source, self.synthetic
        )


def synthetic_calibration(
    input_specs: list[TensorSpec],
    n: int,
    seed: int = 0,
    stream: int = 0,
    onnx_model: onnx.ModelProto | None = None,
) -> CalibrationData:
    """`n` seeded samples per input (SYNTHETIC_DISTRIBUTION); `stream` 1 gives held-out ones.
    Integer inputs read the model (`onnx_model`) for the Gather tables they index."""
    if n < 1:
        raise CalibrationError(f"--calib-synthetic {n}: need at least 1 sample")
    check_fits_in_memory(input_specs, n, f"--calib-synthetic {n}")
    rng = np.random.default_rng([seed, stream])
    tables = gather_table_sizes(onnx_model) if onnx_model is not None else {}
    samples = {}
    for position, spec in enumerate(input_specs):
        shape = (n, *spec.shape)
        dtype = np.dtype(spec.dtype)
        if np.issubdtype(dtype, np.floating):
            # Drawn when read, one sample at a time (drawn.py); the next input's numbers start
            # where these n draws end, as they did when the stack was drawn here.
            samples[spec.name] = DrawnStack(rng.bit_generator.state, spec.shape, dtype, n)
            if position + 1 < len(input_specs):
                for _ in range(n):
                    rng.standard_normal(spec.shape)
        elif spec.name in tables:
            samples[spec.name] = rng.integers(0, tables[spec.name], shape).astype(dtype)
        else:
            samples[spec.name] = _padding_masks(rng, shape, dtype)
    return CalibrationData(samples, f"synthetic (N={n}, seed={seed}, stream={stream})", synthetic=True)


def check_fits_in_memory(input_specs: list[TensorSpec], n: int, what: str) -> None:
    """Refuse, as the user's problem, samples that cannot fit in this machine's memory: one line
    naming the input and the bytes needed (docs/quantization.md). A synthetic float input holds
    one sample at a time (its float64 draw and its copy in the input's dtype); an integer one
    holds all n."""
    available = available_memory_bytes()
    for spec in input_specs:
        dtype = np.dtype(spec.dtype)
        drawn = np.issubdtype(dtype, np.floating)
        held = 1 if drawn else n
        needed = held * math.prod(spec.shape) * (dtype.itemsize + (8 if drawn else 0))
        if needed > available:
            dims = "x".join(map(str, spec.shape)) or "scalar"
            samples = "to draw one sample" if drawn else f"for {n} samples"
            raise CalibrationError(
                f"{what}: input '{spec.name}' ({dims} {dtype.name}) needs {needed:,} bytes {samples}; "
                f"this machine has {available:,} available (give a smaller --input-shape"
                f"{'' if drawn else ' or fewer samples'})"
            )


def check_outputs_fit_in_memory(onnx_model: onnx.ModelProto | None, held: int, what: str) -> None:
    """The accuracy report keeps the float and the quantised model's outputs of every held-out
    sample: refuse a count whose outputs cannot fit, naming the bytes (outputs of unknown
    shape are not counted)."""
    if onnx_model is None:
        return
    per_sample = 0
    for output in onnx_model.graph.output:
        tensor = output.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type) if tensor.elem_type else None
        if dtype is not None and all(dims):
            per_sample += 2 * math.prod(dims) * np.dtype(dtype).itemsize
    needed, available = held * per_sample, available_memory_bytes()
    if needed > available:
        raise CalibrationError(
            f"{what}: the accuracy report keeps both models' outputs of {held} held-out samples, "
            f"{needed:,} bytes; this machine has {available:,} available (give fewer samples or --held-out K)"
        )


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo, capped by the process's address-space limit."""
    import resource

    available = 1 << 62
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return min(available, soft) if soft != resource.RLIM_INFINITY else available


def _padding_masks(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """1 on a random prefix (at least one element) of the last axis, 0 after."""
    if len(shape) < 2 or shape[-1] == 0:
        return np.ones(shape, dtype)
    lengths = rng.integers(1, shape[-1] + 1, shape[:-1])
    return (np.arange(shape[-1]) < lengths[..., None]).astype(dtype)


def gather_table_sizes(model: onnx.ModelProto) -> dict[str, int]:
    """{graph input: rows of the smallest constant table it indexes through Gather}, following
    the input through shape-only ops (INDEX_PASSTHROUGH)."""
    constants = {t.name: tuple(t.dims) for t in model.graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    sizes = {}
    for graph_input in model.graph.input:
        found, frontier, seen = [], [graph_input.name], set()
        while frontier:
            tensor = frontier.pop()
            seen.add(tensor)
            for node in readers.get(tensor, []):
                if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == tensor:
                    table = constants.get(node.input[0])
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    if table is not None and table:
                        found.append(table[axis % len(table)])
                elif node.op_type in INDEX_PASSTHROUGH and node.input[0] == tensor:
                    frontier.extend(o for o in node.output if o not in seen)
        if found:
            sizes[graph_input.name] = int(min(found))
    return sizes


def load_calibration(path: str | Path, input_specs: list[TensorSpec]) -> CalibrationData:
    """Read and check an .npz of samples; every problem is a CalibrationError naming the
    file and the input."""
    path = Path(path)
    arrays = _read_npz(path)
    names = [spec.name for spec in input_specs]
    for key in arrays:
        if key not in names:
            raise CalibrationError(
                f"{path}: array '{key}' is not an input of the model (inputs: {', '.join(names)})"
            )
    samples = {spec.name: _checked(path, spec, arrays) for spec in input_specs}
    counts = {name: stack.shape[0] for name, stack in samples.items()}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name}={count}" for name, count in counts.items())
        raise CalibrationError(f"{path}: inputs have different sample counts ({listed})")
    _refuse_constant(path, samples)
    return CalibrationData(samples, str(path))


def _refuse_constant(path: Path, samples: dict[str, np.ndarray]) -> None:
    """Samples in which every float input holds one value (all zeros, say) give every
    activation a zero range: the quantised model would be measured accurate on them and be
    wrong on real data. A user's mistake, refused naming the input."""
    floats = {name: stack for name, stack in samples.items() if np.issubdtype(stack.dtype, np.floating)}
    constant = {
        name: stack.flat[0] for name, stack in floats.items() if stack.size and stack.min() == stack.max()
    }
    if floats and len(constant) == len(floats):
        name, value = next(iter(constant.items()))
        raise CalibrationError(
            f"{path}: input '{name}' is {float(value):g} in every element of every sample: calibration "
            "needs samples that vary as real inputs do"
        )


def zero_range_warnings(stats: dict, tensors) -> list[str]:
    """One warning per calibrated tensor that held one value in every sample (its range is
    then a guess): `tensors` maps each tensor to the name the user knows it by."""
    found = []
    for name, label in tensors.items():
        tensor = stats.get(name)
        if tensor is not None and tensor.count and tensor.minimum == tensor.maximum:
            found.append(
                f"calibration: tensor {label} is {tensor.minimum + 0.0:g} in every calibration sample "
                "(zero range): its int8 range is a guess; calibrate on samples that exercise it"
            )
    return found


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise CalibrationError(f"{path}: calibration file does not exist")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CalibrationError(f"{path}: not a readable NumPy .npz file ({first_line(exc)})") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise CalibrationError(
            f"{path}: expected an .npz archive with one array per input, got a single array"
        )
    try:
        with loaded as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CalibrationError(f"{path}: not a readable NumPy .npz file ({first_line(exc)})") from None
    if not arrays:
        raise CalibrationError(f"{path}: the file holds no arrays")
    return arrays


def _checked(path: Path, spec: TensorSpec, arrays: dict[str, np.ndarray]) -> np.ndarray:
    if spec.name not in arrays:
        held = ", ".join(arrays) or "nothing"
        raise CalibrationError(f"{path}: no samples for input '{spec.name}' (the file holds: {held})")
    stack = arrays[spec.name]
    if stack.dtype != np.dtype(spec.dtype):
        raise CalibrationError(
            f"{path}: input '{spec.name}' is {stack.dtype}, the model expects {spec.dtype} "
            "(convert with .astype)"
        )
    stack = _as_stack(path, spec, stack)
    if stack.shape[0] == 0:
        raise CalibrationError(f"{path}: input '{spec.name}' holds 0 samples")
    if np.issubdtype(stack.dtype, np.floating):
        bad = ~np.isfinite(stack.reshape(stack.shape[0], -1)).all(axis=1)
        if bad.any():
            index = int(np.argmax(bad))
            what = "NaN" if np.isnan(stack[index]).any() else "Inf"
            raise CalibrationError(f"{path}: input '{spec.name}' sample {index} contains {what}")
    return np.ascontiguousarray(stack)


def _as_stack(path: Path, spec: TensorSpec, stack: np.ndarray) -> np.ndarray:
    shape = tuple(spec.shape)
    if stack.shape[1:] == shape:
        return stack
    if shape and shape[0] == 1 and stack.shape[1:] == shape[1:]:
        return stack.reshape((stack.shape[0], *shape))
    accepted = f"(N, {', '.join(map(str, shape))})"
    if shape and shape[0] == 1:
        accepted += f" or (N, {', '.join(map(str, shape[1:]))})"
    raise CalibrationError(f"{path}: input '{spec.name}' has shape {tuple(stack.shape)}; expected {accepted}")


@dataclass(frozen=True)
class SplitData:
    """Samples to calibrate on, samples to measure accuracy on, and what to tell the user."""

    calibration: CalibrationData
    held_out: CalibrationData
    warnings: tuple[str, ...] = ()


def split_file_samples(data: CalibrationData, held: int | None = None) -> SplitData:
    """The last `held` of a file's samples are held out (default: the last HELD_OUT_FRACTION,
    at least one); at least one sample is left to calibrate on."""
    n = data.count
    if held is not None and held >= n:
        raise CalibrationError(
            f"--held-out {held}: {data.source} holds {n} sample(s); at least one must be left to calibrate on"
        )
    if n == 1:
        warning = f"{data.source}: one sample only, so accuracy is measured on the calibration sample itself"
        return SplitData(data, data, (warning,))
    held = held if held is not None else max(1, math.ceil(n * HELD_OUT_FRACTION))
    calibration = data.subset(range(0, n - held), f"{data.source} [0:{n - held}]")
    held_out = data.subset(range(n - held, n), f"{data.source} [{n - held}:{n}]")
    return SplitData(calibration, held_out)


def synthetic_held_out_count(n: int, held: int | None = None) -> int:
    """How many held-out samples go with `n` synthetic ones: `held` (--held-out) when given,
    else max(MIN_SYNTHETIC_HELD_OUT, n // 4)."""
    return held if held is not None else max(MIN_SYNTHETIC_HELD_OUT, n // 4)


def synthetic_split(
    input_specs: list[TensorSpec],
    n: int,
    seed: int = 0,
    onnx_model: onnx.ModelProto | None = None,
    held: int | None = None,
) -> SplitData:
    """`n` synthetic calibration samples and synthetic_held_out_count(n, held) fresh held-out
    samples from an independent stream, with the synthetic-data warning."""
    held = synthetic_held_out_count(n, held)
    check_fits_in_memory(input_specs, n, f"--calib-synthetic {n}")
    check_fits_in_memory(input_specs, held, f"--held-out {held}")
    check_outputs_fit_in_memory(onnx_model, held, f"--calib-synthetic {n}, --held-out {held}")
    calibration = synthetic_calibration(input_specs, n, seed, stream=0, onnx_model=onnx_model)
    held_out = synthetic_calibration(input_specs, held, seed, stream=1, onnx_model=onnx_model)
    warning = SYNTHETIC_WARNING.format(what=f"{n} samples, {SYNTHETIC_DISTRIBUTION}, seed {seed}")
    return SplitData(calibration, held_out, (warning,))
