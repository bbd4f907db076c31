"""The differential check of the fuzzer: vpuc against onnxruntime on the same model.

    float model, --target cpu      onnxruntime (optimisations off) on the float model;
                                   |ours - ref| <= 1e-4 * (|ref| + max|ref|) + 1e-5
    QDQ model, --target vpu/...    1. every int8 output of every VPU subgraph (run in the
                                   simulator) within 1 LSB of the artifact's QDQ reference
                                   (the same graph with that subgraph evaluated on the host
                                   in float QDQ semantics: runtime/check.py, as `vpuc run
                                   --check` does);
                                   2. that QDQ reference's model outputs within 1 LSB of
                                   onnxruntime (optimisations off) on the QDQ model, the
                                   ONNX QDQ semantics (1 LSB: the scale of the
                                   DequantizeLinear behind the output);
                                   3. with no VPU subgraph, the artifact's own outputs
                                   within 1 LSB of onnxruntime.
                                   In 2 and 3 an answer further off passes only when
                                   onnxruntime gives it with some near-tie roundings (within
                                   vpuc.runtime.ties.TIE_STEPS of k + 0.5) taken the other way: each
                                   quantised tensor then within its 1 LSB (runtime/ties.py).
                                   Compiled with the profitability rule off (VPU_CHOICES): the
                                   cost model would keep most small graphs on the CPU. A graph
                                   with VPU subgraphs must have run them all in the simulator;
                                   `vpu graphs` counts the graphs that had any.

vpuc runs through its public API, as a user's script would: compile_model(...).save() and
vpuc.runtime.load(path).run(inputs). A compile-time refusal (CompileError) is a clean answer,
counted but not a failure; anything else that raises, and any mismatch, is a failure. A
failure is saved (the last one hypothesis reports is the shrunk, minimal one) and at the end
of the session bisected over the graph passes, then written to tests/fuzz_regressions/.
"""

from __future__ import annotations

import collections
import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import onnx

from vpuc import runtime
from vpuc.compiler import CompileError, compile_model
from vpuc.compiler.pipeline import PassSelection
from vpuc.runtime.ties import explained_by_ties, float_tolerance  # one float tolerance

REPO = Path(__file__).resolve().parents[2]
REGRESSIONS = REPO / "tests" / "fuzz_regressions"
PENDING = REGRESSIONS / ".pending"
STATS_JSON = REPO / "out" / "fuzz_stats.json"
LSB_SLACK = 1.0 + 1e-5  # float32 rounding of the dequantised values themselves
FLOAT32_ULPS = 4  # float32 roundings of a float op's result, in ulps of the value
VPU_CHOICES = {"profitability": False, "min_subgraph_ops": 1}  # every VPU-able layer on the VPU

# graphs run / refused / failed, per target, in this session
STATS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
REFUSALS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


class Mismatch(AssertionError):
    """vpuc's answer differs from the reference."""


def ort_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))


def vpuc_outputs(
    model: onnx.ModelProto, target: str, inputs: dict[str, np.ndarray], **choices
) -> dict[str, np.ndarray]:
    """compile_model -> save -> runtime.load -> run; CompileError propagates."""
    artifact = compile_model(model, target=target, **choices)
    with tempfile.TemporaryDirectory(prefix="vpuc-fuzz-") as workdir:
        path = artifact.save(Path(workdir) / "model.vpub")
        return runtime.load(path).run(inputs)


def float_mismatch(ours: dict, ref: dict) -> str | None:
    for name, expected in ref.items():
        got = ours.get(name)
        if got is None or got.shape != expected.shape or got.dtype != expected.dtype:
            return f"output '{name}': {_describe(got)}, expected {_describe(expected)}"
        if expected.size == 0:
            continue
        bound = float_tolerance(expected)
        with np.errstate(invalid="ignore"):  # inf - inf: judged by equality below
            off = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        close = np.isfinite(expected) & (off <= bound)  # an infinity is only matched by itself
        bad = ~(close | (got == expected) | (np.isnan(got) & np.isnan(expected)))
        if bad.any():
            return _first_bad(name, got, expected, bad)
    return None


def lsb_mismatch(ours: dict, ref: dict, lsbs: dict[str, float | None]) -> str | None:
    """Within 1 LSB where the output comes from a DequantizeLinear; a float output (no
    quantised tensor behind it) is held to the float tolerance."""
    floats = [name for name in ref if lsbs.get(name) is None]
    problem = float_mismatch({n: ours.get(n) for n in floats}, {n: ref[n] for n in floats})
    if problem:
        return problem
    for name, expected in ref.items():
        if name in floats:
            continue
        got = ours.get(name)
        if got is None or got.shape != expected.shape or got.dtype != expected.dtype:
            return f"output '{name}': {_describe(got)}, expected {_describe(expected)}"
        # plus a few float32 ulps of the value: a float op after the last DequantizeLinear
        # (HardSigmoid's alpha * x + beta) rounds its own result, case vpu-plus-d06f5e1ee0
        ulps = FLOAT32_ULPS * np.spacing(np.abs(expected).astype(np.float32)).astype(np.float64)
        bad = np.abs(got.astype(np.float64) - expected) > lsbs[name] * LSB_SLACK + ulps
        if bad.any():
            return _first_bad(name, got, expected, bad) + f" (1 LSB = {lsbs[name]:.4g})"
    return None


def _describe(array) -> str:
    return "missing" if array is None else f"{array.dtype}{list(array.shape)}"


def _first_bad(name, got, expected, bad) -> str:
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return (
        f"output '{name}': {int(bad.sum())} of {bad.size} elements differ; at {list(index)}: "
        f"{float(got[index])!r} vs onnxruntime {float(expected[index])!r}"
    )


# Ops through which a value keeps the quantisation grid of its input (or shrinks errors).
_GRID_KEEPING = {
    "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice",
    "MaxPool", "GlobalMaxPool", "Relu", "Concat", "Pad", "Abs", "Neg",
    "ReduceMean", "GlobalAveragePool", "AveragePool",
    "Softsign", "Tanh", "Sigmoid", "Sin", "Cos", "Atan",
}  # fmt: skip
# (Abs and Neg map the grid onto itself: a 1-LSB difference upstream stays 1 LSB. Without
# them a float Abs of a requantised tensor was held to the float tolerance: the harness's
# fault in case vpu-be68bf90f2, where bn_fold moved one value across a rounding boundary.
# A mean leaves the grid but not the bound: |mean(a) - mean(b)| <= max |a - b|, so a float
# ReduceMean of a requantised tensor 1 LSB off in one element is LSB / 2 off: the harness's
# fault in case vpu-plus-8caf4afc05: bn_fold moved a GlobalAveragePool input 1 LSB.
# A float op whose slope is at most 1 everywhere (|f(a) - f(b)| <= |a - b|) keeps the bound
# the same way: Softsign, Tanh, Sigmoid, Sin, Cos, Atan. Without them a float Softsign of a
# requantised tensor 1 LSB off (0.021) was held to the float tolerance: the harness's fault
# in case vpu-plus-59ea3372b4, bn_fold's float order again. Min and Max keep the largest
# bound of their tensor inputs (a constant input adds none): case vpu-plus-bd39fe99ca,
# a Min(x, constant) of a tensor bn_fold moved 1 LSB (0.0167), held to the float tolerance.
# A float Add or Sub is off by at most the sum of its tensor inputs' bounds, a float
# HardSigmoid by alpha times its input's: case vpu-plus-d4e7f78777, Sub(HardSigmoid(x), c) of
# a tensor bn_fold moved 1 LSB, held to the float tolerance.)


def output_lsbs(model: onnx.ModelProto) -> dict[str, float | None]:
    """For each graph output, the scale of the DequantizeLinear it comes from through
    grid-keeping ops (the largest, per-channel or over Concat inputs); None when a float op
    computes it."""
    producer = {out: node for node in model.graph.node for out in node.output}
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}

    def lsb(tensor: str) -> float | None:
        node = producer.get(tensor)
        if node is None:
            return None
        if node.op_type == "DequantizeLinear":
            scale = constants.get(node.input[1])
            return None if scale is None else float(np.max(scale))
        if node.op_type in _GRID_KEEPING:
            data = node.input if node.op_type == "Concat" else node.input[:1]
            found = [lsb(t) for t in data]
            return None if not found or None in found else max(found)
        if node.op_type in ("Min", "Max"):  # |min(a, c) - min(b, c)| <= |a - b|; a constant moves nothing
            found = [lsb(t) for t in node.input if t not in constants]
            return None if not found or None in found else max(found)
        if node.op_type == "HardSigmoid":  # slope alpha: |f(a) - f(b)| <= |alpha| |a - b|
            alpha = next((a.f for a in node.attribute if a.name == "alpha"), 0.2)
            found = lsb(node.input[0])
            return None if found is None else abs(alpha) * found
        if node.op_type in ("Add", "Sub"):  # |(a + b) - (a' + b')| <= |a - a'| + |b - b'|
            found = [lsb(t) for t in node.input if t not in constants]
            return None if not found or None in found else sum(found)
        return None

    return {o.name: lsb(o.name) for o in model.graph.output}


def run_check(model: onnx.ModelProto, target: str, inputs: dict, kind: str, **choices) -> str | None:
    """None when vpuc agrees with the reference (or refuses cleanly), else what differs.
    Raises for anything that is neither (a crash is a failure too)."""
    reference = ort_outputs(model, inputs)
    try:
        if kind == "float":
            return float_mismatch(vpuc_outputs(model, target, inputs, **choices), reference)
        return qdq_mismatch(model, target, inputs, reference, **choices)
    except CompileError as exc:
        REFUSALS[target][_short(exc)] += 1
        STATS[target]["refused"] += 1
        return None


def qdq_mismatch(model, target: str, inputs: dict, reference: dict, **choices) -> str | None:
    """The three checks of the module doc on a QDQ model compiled for a VPU target."""
    from vpuc.runtime.check import subgraph_check

    # The cost model keeps the fuzzer's small graphs on the CPU; here the VPU must run them.
    choices = {**VPU_CHOICES, **choices}
    artifact = compile_model(model, target=target, **choices)
    with tempfile.TemporaryDirectory(prefix="vpuc-fuzz-") as workdir:
        executable = runtime.load(artifact.save(Path(workdir) / "model.vpub"))
        executable.record_outputs(True)
        ours = executable.run(inputs)
        lsbs = output_lsbs(model)
        if not executable.vpu_calls:
            return _mismatch_unless_ties(model, target, inputs, ours, reference, lsbs)
        ran = {call.subgraph for call in executable.last_run.calls}
        if ran != {call.subgraph for call in executable.vpu_calls}:
            return f"VPU subgraphs {sorted(ran)} ran, the artifact has {len(executable.vpu_calls)}"
        STATS[target]["vpu graphs"] += 1
        STATS[target]["vpu subgraphs"] += len(ran)
        check = subgraph_check(executable, 1)  # each subgraph on the inputs this run gave it
        _, qdq_outputs = executable.reference_run(inputs)
    bad = [row for row in check["outputs"] if not row["passed"]]
    if bad:
        row = bad[0]
        if row.get("missing"):
            return f"VPU subgraph {row['subgraph']}: {row['missing']}"
        return (
            f"VPU subgraph {row['subgraph']} output '{row['output']}': {row['max_lsb']} LSB from the "
            f"QDQ reference ({row['exact_share']:.1%} of {row['elements']} exact)"
        )
    problem = _mismatch_unless_ties(model, target, inputs, qdq_outputs, reference, lsbs)
    return None if problem is None else f"QDQ reference against onnxruntime: {problem}"


def _mismatch_unless_ties(model, target: str, inputs: dict, ours: dict, reference: dict, lsbs) -> str | None:
    """lsb_mismatch, except where onnxruntime itself gives `ours` once some near-tie roundings
    go the other way (runtime/ties.py): each quantised tensor is then within its 1 LSB."""
    problem = lsb_mismatch(ours, reference, lsbs)
    if problem is None:
        return None
    flips = explained_by_ties(model, inputs, ours, lambda o, r: lsb_mismatch(o, r, lsbs), lsbs)
    if flips is None:
        return problem
    STATS[target]["explained by rounding ties"] += 1
    return None


def _short(exc: Exception) -> str:
    text = str(exc)
    return text.split(": ", 1)[-1][:120]


def check_example(model: onnx.ModelProto, target: str, inputs: dict, kind: str, test: str) -> None:
    """The property: vpuc answers as onnxruntime does, or refuses; else save and fail."""
    STATS[target]["graphs"] += 1
    try:
        problem = run_check(model, target, inputs, kind)
    except Exception as exc:
        problem = f"crash: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    if problem is None:
        return
    STATS[target]["failing examples"] += 1
    _save_pending(model, target, inputs, kind, test, problem)
    raise Mismatch(f"{target}: {problem}")


def _save_pending(model, target, inputs, kind, test, problem) -> None:
    """Overwrite this test's pending case: hypothesis replays the minimal one last."""
    PENDING.mkdir(parents=True, exist_ok=True)
    stem = PENDING / f"{test}-{target}"
    onnx.save(model, stem.with_suffix(".onnx"))
    np.savez(stem.with_suffix(".npz"), **inputs)
    meta = {"target": target, "kind": kind, "test": test, "problem": problem}
    stem.with_suffix(".json").write_text(json.dumps(meta, indent=2))


def first_bad_pass(model: onnx.ModelProto, target: str, inputs: dict, kind: str) -> dict:
    """opt-bisect: the first graph pass after which vpuc's answer differs from onnxruntime's
    (the pass list of -O3 cut at N passes, N by binary search)."""
    steps = PassSelection().steps()

    def fails(limit: int) -> bool:
        try:
            return run_check(model, target, inputs, kind, opt_bisect_limit=limit) is not None
        except Exception:
            return True

    if fails(0):
        return {"first_bad_pass": None, "verdict": "fails with no graph pass: not a graph pass's fault"}
    if not fails(len(steps)):
        return {"first_bad_pass": None, "verdict": "passes with every graph pass (fixed, or flaky)"}
    good, bad = 0, len(steps)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (good, mid) if fails(mid) else (mid, bad)
    return {
        "first_bad_pass": steps[bad - 1].name,
        "verdict": f"correct after {good} passes, wrong after {bad}",
    }


def finish_pending() -> list[Path]:
    """Bisect every pending failure and file it under tests/fuzz_regressions/."""
    saved = []
    for meta_path in sorted(PENDING.glob("*.json")) if PENDING.exists() else []:
        meta = json.loads(meta_path.read_text())
        model = onnx.load(meta_path.with_suffix(".onnx"))
        with np.load(meta_path.with_suffix(".npz")) as data:
            inputs = {k: data[k] for k in data.files}
        meta.update(first_bad_pass(model, meta["target"], inputs, meta["kind"]))
        digest = hashlib.sha256(model.SerializeToString()).hexdigest()[:10]
        stem = REGRESSIONS / f"{meta['target']}-{digest}"
        onnx.save(model, stem.with_suffix(".onnx"))
        np.savez(stem.with_suffix(".npz"), **inputs)
        meta.update({"ops": sorted({n.op_type for n in model.graph.node}), "nodes": len(model.graph.node)})
        stem.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n")
        for suffix in (".json", ".onnx", ".npz"):
            meta_path.with_suffix(suffix).unlink(missing_ok=True)
        saved.append(stem.with_suffix(".json"))
    return saved


def write_stats(saved: list[Path]) -> dict:
    figures = {
        "targets": {target: dict(counts) for target, counts in sorted(STATS.items())},
        "refusals": {target: dict(c.most_common(10)) for target, c in sorted(REFUSALS.items())},
        "saved_regressions": [str(p.relative_to(REPO)) for p in saved],
    }
    STATS_JSON.parent.mkdir(parents=True, exist_ok=True)
    STATS_JSON.write_text(json.dumps(figures, indent=2))
    return figures
