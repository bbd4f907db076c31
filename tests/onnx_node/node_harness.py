"""ONNX's own backend node tests through vpuc's CPU path, as a user runs them.

`onnx.backend.test.case.node.collect_testcases()` builds the cases ONNX ships with its
operator specs (1884 with onnx 1.23): a small model, its inputs and the expected outputs,
written by the ONNX authors. Each case runs here exactly as a user would run it, through
the `vpuc` command line (in-process, to spare a Python start per case):

    vpuc compile model.onnx --target cpu -o model.vpub
    vpuc run model.vpub --inputs inputs.npz --outputs outputs.npz --allow-nonfinite

and the outputs are compared with the expected ones the way ONNX's own backend runner does
(onnx.backend.test.runner): same number of outputs, same shape, same dtype, values within
the case's rtol/atol (NaN equal to NaN).

Two things a user would do too: an input that only sets a parameter (a Reduce's axes, a
Resize's sizes, TopK's K: the slots frontend/fold.py lists as attribute-like) is bound to
the case's value, as a constant of the model, since vpuc compiles static shapes only; and
arrays of ml_dtypes types (bfloat16, float8), which .npz files store as raw bytes, are
written and read as such (`vpuc run` takes raw bytes of the right width for them).

Outcomes:
    pass     the outputs match
    refused  `vpuc compile` exits 2 with its one-line reason (a refusal, never wrong)
    wrong    vpuc answered, and the answer differs (shape, dtype, count or values)
    disputed wrong by that rule, but the expected output is the one off: listed with the
             evidence in disputed.txt (a float64 evaluation of the op)
    error    `vpuc run` exits 2 on inputs the model declares (a bug of ours)
    crash    exit 3 (internal error) from either command, or the worker died / timed out
    harness  the case's inputs cannot be written to an .npz (sequences, optionals)

tests/onnx_node/run_node_tests.py runs them all; tests/onnx_node/test_node_pass_list.py
(CI) replays a sample of the pass list.
"""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
PASS_LIST = HERE / "pass_list.txt"
DISPUTED_LIST = HERE / "disputed.txt"
OUTCOMES = ("pass", "refused", "wrong", "disputed", "error", "crash", "harness")


@dataclass(frozen=True)
class NodeCase:
    """One backend node test, reduced to what pickles: the model and its one data set."""

    name: str
    model: bytes
    inputs: list
    outputs: list
    rtol: float
    atol: float

    @property
    def op_types(self) -> list[str]:
        return [node.op_type for node in onnx.load_from_string(self.model).graph.node]


@dataclass
class CaseResult:
    name: str
    outcome: str
    detail: str
    ops: str  # the op type of a single-node case, else "expanded" / "multi-node"
    seconds: float

    def to_json(self) -> dict:
        return asdict(self)


def collect_cases(pattern: str | None = None) -> list[NodeCase]:
    """Every node test case (optionally those whose name matches the regex `pattern`)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = collect_testcases(None)
    regex = re.compile(pattern) if pattern else None
    cases = []
    for case in sorted(found, key=lambda c: c.name):
        if regex and not regex.search(case.name):
            continue
        inputs, outputs = case.data_sets[0]
        cases.append(
            NodeCase(
                case.name, case.model.SerializeToString(), list(inputs), list(outputs), case.rtol, case.atol
            )
        )
    return cases


def case_ops(case: NodeCase) -> str:
    ops = case.op_types
    if len(ops) == 1:
        return ops[0]
    return "expanded" if "_expanded" in case.name else "multi-node"


def run_case(case: NodeCase) -> CaseResult:
    """Compile and run one case through the CLI; classify the outcome."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vpuc-node-") as workdir:
        outcome, detail = _run_in(case, Path(workdir))
    disputed = read_disputed()
    if outcome == "wrong" and case.name in disputed:
        outcome, detail = "disputed", f"{detail}; {disputed[case.name]}"
    return CaseResult(case.name, outcome, detail, case_ops(case), round(time.perf_counter() - start, 3))


def _run_in(case: NodeCase, workdir: Path) -> tuple[str, str]:
    model = onnx.load_from_string(case.model)
    arrays, not_tensor = _input_arrays(model, case.inputs)
    model, arrays = bind_parameter_inputs(model, arrays)
    model_path, artifact = workdir / "model.onnx", workdir / "model.vpub"
    onnx.save(model, model_path)
    code, err = _vpuc("compile", model_path, "--target", "cpu", "-o", artifact)
    if code != 0:
        return ("refused" if code == 2 else "crash"), err
    if not_tensor:  # vpuc compiled it, but an .npz cannot carry this input
        return "harness", not_tensor
    np.savez(workdir / "inputs.npz", **{name: _raw(a) for name, a in arrays.items()})
    outputs_path = workdir / "outputs.npz"
    code, err = _vpuc(
        "run", artifact, "--inputs", workdir / "inputs.npz", "--outputs", outputs_path, "--allow-nonfinite"
    )  # NaN and infinities are expected outputs of many cases (Mod, Cast, empty reductions)
    if code != 0:
        return ("error" if code == 2 else "crash"), err
    with np.load(outputs_path) as data:
        got = {name: data[name] for name in data.files}
    names = [o.name for o in model.graph.output]
    return compare_outputs(names, got, [_as_array(o) for o in case.outputs], case.rtol, case.atol)


def _vpuc(*args) -> tuple[int, str]:
    """`vpuc ARGS` in this process: (exit code, its stderr on one line)."""
    from vpuc.compiler.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return code, " | ".join(line for line in err.getvalue().splitlines() if line.strip())


def bind_parameter_inputs(
    model: onnx.ModelProto, arrays: dict[str, np.ndarray]
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Graph inputs read only in attribute-like slots become initializers with their value."""
    from vpuc.compiler.frontend.fold import ATTRIBUTE_LIKE_INPUTS

    readers: dict[str, list[bool]] = {}
    for node in model.graph.node:
        slots = ATTRIBUTE_LIKE_INPUTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
        for position, tensor in enumerate(node.input):
            readers.setdefault(tensor, []).append(position in slots)
    outputs = {o.name for o in model.graph.output}
    bound = [n for n in arrays if readers.get(n) and all(readers[n]) and n not in outputs]
    if not bound:
        return model, arrays
    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept = [vi for vi in model.graph.input if vi.name not in bound]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    for name in bound:
        model.graph.initializer.append(onnx.numpy_helper.from_array(arrays[name], name))
    return model, {n: a for n, a in arrays.items() if n not in bound}


def _raw(array: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (bfloat16, float8, ...) as raw bytes: .npy has no code for them."""
    return array.view(f"V{array.dtype.itemsize}") if array.dtype.kind == "V" else array


def _input_arrays(model: onnx.ModelProto, values: list) -> tuple[dict[str, np.ndarray], str]:
    """The tensor inputs by name, and what is wrong with the first one that is not a tensor."""
    initializers = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in initializers]
    arrays, not_tensor = {}, ""
    for name, value in zip(names, values, strict=False):
        array = _as_array(value)
        if isinstance(array, np.ndarray):
            arrays[name] = array
        elif not not_tensor:
            not_tensor = f"input '{name}' is a {type(value).__name__}, not a tensor"
    return arrays, not_tensor


def _as_array(value):
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, np.generic):  # a 0-d tensor written as a numpy scalar
        return np.asarray(value)
    return value


def compare_outputs(
    names: list[str], got: dict[str, np.ndarray], expected: list, rtol: float, atol: float
) -> tuple[str, str]:
    """As onnx.backend.test.runner.Runner.assert_similar_outputs: ("pass"|"wrong", detail)."""
    if len(got) != len(expected):
        return "wrong", f"{len(got)} outputs, expected {len(expected)}"
    for name, ref in zip(names, expected, strict=True):
        if not isinstance(ref, np.ndarray):
            return "wrong", f"output '{name}': expected a {type(ref).__name__}, got a tensor"
        out = got.get(name)
        if out is None:
            return "wrong", f"output '{name}' missing"
        if out.dtype.kind == "V" and ref.dtype.kind == "V" and out.dtype.itemsize == ref.dtype.itemsize:
            out = out.view(ref.dtype)  # raw bytes of an ml_dtypes type (see the module doc)
        if out.shape != ref.shape:
            return "wrong", f"output '{name}': shape {list(out.shape)}, expected {list(ref.shape)}"
        if out.dtype != ref.dtype:
            return "wrong", f"output '{name}': dtype {out.dtype}, expected {ref.dtype}"
        if ref.dtype == object or ref.dtype.kind in "USb":
            same = np.array_equal(out, ref)
        else:
            a, b, tol = out, ref, rtol
            if a.dtype.kind not in "fiu":  # bfloat16, float8...: compare as float32
                a, b = a.astype(np.float32), b.astype(np.float32)
                tol = max(rtol, 2**-6) if ref.dtype.name == "bfloat16" else rtol  # as ONNX's runner
            same = bool(np.allclose(a, b, rtol=tol, atol=atol, equal_nan=True))
        if not same:
            return "wrong", f"output '{name}': values differ ({_diff(out, ref)})"
    return "pass", ""


def _diff(out: np.ndarray, ref: np.ndarray) -> str:
    try:
        a, b = out.astype(np.float64), ref.astype(np.float64)
        bad = ~np.isclose(a, b, rtol=1e-3, atol=1e-7, equal_nan=True)
        index = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else ()
        return f"{int(bad.sum())} of {a.size} elements; at {list(index)}: {a[index]!r} vs {b[index]!r}"
    except (TypeError, ValueError):
        return "not comparable as numbers"


def read_pass_list(path: Path = PASS_LIST) -> dict[str, str]:
    """{case name: op} from the pass list (lines `name op`, `#` comments)."""
    lines = path.read_text().splitlines() if path.exists() else []
    rows = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    return {row[0]: row[1] for row in rows}


def read_disputed(path: Path = DISPUTED_LIST) -> dict[str, str]:
    """{case name: evidence} from disputed.txt."""
    lines = path.read_text().splitlines() if path.exists() else []
    rows = [line.split(maxsplit=1) for line in lines if line.strip() and not line.startswith("#")]
    return {row[0]: row[1] if len(row) > 1 else "" for row in rows}


def run_case_in_process(case: NodeCase) -> CaseResult:
    """The quick form for CI: the same compile (driver.prepare_model, then build.py's
    scheduling and relax.build), the host library run from memory on the VM (no .vpub file,
    no .npz, no gcc link), the same comparison."""
    import tvm

    from vpuc.compiler import CompileError, compat
    from vpuc.compiler.driver import CompileOptions, prepare_model
    from vpuc.compiler.host.build import host_executable
    from vpuc.compiler.host.target import resolve_host_target

    start = time.perf_counter()
    model = onnx.load_from_string(case.model)
    arrays, not_tensor = _input_arrays(model, case.inputs)
    model, arrays = bind_parameter_inputs(model, arrays)
    try:
        prepared = prepare_model(model, "cpu", CompileOptions())
        executable, _ = host_executable(prepared.mod, resolve_host_target(prepared.target))
        vm = compat.virtual_machine(executable)
    except CompileError as exc:
        return CaseResult(case.name, "refused", str(exc), case_ops(case), time.perf_counter() - start)
    names = [spec.name for spec in prepared.imported.inputs]
    outputs = compat.flatten_outputs(vm["main"](*[tvm.runtime.tensor(arrays[n]) for n in names]))
    got = dict(zip([spec.name for spec in prepared.imported.outputs], outputs, strict=False))
    expected = [_as_array(o) for o in case.outputs]
    outcome, detail = compare_outputs(
        [o.name for o in model.graph.output], got, expected, case.rtol, case.atol
    )
    return CaseResult(case.name, outcome, detail or not_tensor, case_ops(case), time.perf_counter() - start)
