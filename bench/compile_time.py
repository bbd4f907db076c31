"""Compile time, per model and per step, against Vela's compile time measured in the same run.

Each model is compiled in a fresh process twice: once from the CLI (`vpuc compile`, the wall
a user waits) and once by a worker that times each step itself: importing TVM, the rest of
vpuc's imports, the ONNX import, the graph passes, decompose, quantise/calibrate, partition,
lower, the host build without the QDQ reference, the reference (a second host build with it,
minus the first) and writing the artifact. The step names are the driver's report keys
(report["timings_s"]); the passes' are summed.

The peer is Vela 5.2 compiling the anchors' int8 .tflite for Ethos-U55-256, in its own venv:

    python3 -m venv bench/.venv-vela && bench/.venv-vela/bin/pip install ethos-u-vela==5.2.0

Two ratios per model: vpuc's CLI wall against Vela's CLI wall (both with process start and
imports), and vpuc's steps after its imports against Vela's compile proper (vela.main timed
in one process after its imports). Without that venv they are against the figures recorded
in issue 23 (CLI wall 0.77-0.93 s, compile proper 0.2-0.4 s; the upper ends are used).

    python bench/compile_time.py [--repeats N] [--models tinyconv,resnet8,...] [--profile] [--in-process N]
                                 [--vision]

`--vision` adds issue 23's public vision exports (float, calibrated; goal 20 s each), each
skipped with a line when its file is absent from VPUC_VISION (default bench/out/vision):
PaddleOCR's direction classifier and PP-OCRv3 detector (ch_ppocr_mobile_v2.0_cls_infer.onnx,
ch_PP-OCRv3_det_infer.onnx, public exports to place there), the YOLO-class detectors
`python bench/vision_models.py` writes there (random weights, the published structures) and
the ~10 MB classifier bench/torch_classifier.py exports with PyTorch (MobileNetV2-224).

`--in-process N` also times N repeated compiles of each QDQ model in one process, after one
warm-up compile each (what a script calling compile_model, or the sweep, pays per compile).
`--profile` runs cProfile on the slowest model (in-process, after the imports) and records
the top functions by cumulative time. Writes bench/out/compile_time.json, with
`bytecode_cached`: whether the compile's imports found Python's bytecode cache (run with
PYTHONDONTWRITEBYTECODE unset, or every fresh process compiles vpuc's sources again).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ANCHORS = Path(os.environ.get("VPUC_ANCHORS", ROOT.parent / "shared" / "anchors"))
FIXTURES = ROOT / "tests" / "fixtures" / "tf2onnx"
VELA = Path(__file__).resolve().parent / ".venv-vela" / "bin" / "vela"
VPUC = Path(sys.executable).parent / "vpuc"
RECORDED_VELA_S = 0.4  # issue 23: Vela's compile proper, 0.2-0.4 s (upper end)
RECORDED_VELA_WALL_S = 0.93  # issue 23: its CLI wall, 0.77-0.93 s (upper end)
GOAL_CLI_S, GOAL_AFTER_TVM_S, GOAL_FLOAT_S = 1.5, 0.5, 3.0  # issue 23's goals (idle machine)
GOAL_REPEATED_S = 0.5  # issue 23: a repeated compile in one process, QDQ models
GOAL_VISION_S = 20.0  # issue 23: public vision exports on `--target vpu`, idle
VISION = Path(os.environ.get("VPUC_VISION", Path(__file__).resolve().parent / "out" / "vision"))
# name: (file in VISION, the input's shape: --input-shape for symbolic or fixed dims)
VISION_MODELS = {
    "ocr_cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "x=1x3x48x192"),
    "ocr_det_320": ("ch_PP-OCRv3_det_infer.onnx", "x=1x3x320x320"),
    "yolov8n_320": ("yolov8n_320.onnx", "images=1x3x320x320"),
    "yolox_s_416": ("yolox_s_416.onnx", "images=1x3x416x416"),
    "mobilenetv2_224": ("mobilenetv2_224.onnx", None),  # bench/torch_classifier.py: a 14 MB PyTorch export
}
TARGET = "vpu"


def _models(zoo_dir: Path, vision: bool = False) -> dict[str, dict]:
    models = {}
    for name in ("tinyconv", "resnet8"):
        for layout, suffix in (("nhwc", ""), ("nchw", "_nchw")):
            path = ANCHORS / name / f"{name}_int8_qdq{suffix}.onnx"
            if path.exists():
                tflite = ANCHORS / name / f"{name}_int8.tflite"
                models[f"{name}_{layout}"] = {"path": path, "kind": "qdq", "tflite": tflite}
    for name in ("tflite_dscnn", "tflite_mobilenet"):  # issue 23's other MLPerf-Tiny-class QDQ models
        models[name] = {"path": FIXTURES / f"{name}.onnx", "kind": "qdq", "tflite": None}
    subprocess.run([str(VPUC), "zoo", str(zoo_dir)], check=True, capture_output=True)
    for path in sorted(zoo_dir.glob("*.onnx")):
        models[f"zoo_{path.stem}"] = {"path": path, "kind": "float", "tflite": None}
    for name, (file, shape) in VISION_MODELS.items() if vision else ():
        if (VISION / file).exists():
            models[name] = {"path": VISION / file, "kind": "vision", "tflite": None, "input_shape": shape}
        else:
            print(f"{name:28s} skipped: {VISION / file} is absent")
    return models


def _shapes(shape: str | None) -> dict[str, tuple[int, ...]]:
    """--input-shape's NAME=AxBxC as CompileOptions.input_shapes."""
    if not shape:
        return {}
    name, dims = shape.split("=")
    return {name: tuple(int(d) for d in dims.split("x"))}


def worker(model: str, out_dir: str, shape: str | None = None) -> dict:
    """One compile, each step timed (run in a fresh process)."""
    start = time.perf_counter()
    from vpuc.compiler.tvm_import import import_tvm

    import_tvm()  # as the CLI imports it (its global functions listed once per number of them)
    steps = {"import_tvm_s": time.perf_counter() - start}
    start = time.perf_counter()
    from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model

    steps["import_vpuc_s"] = time.perf_counter() - start
    cpu_start = time.process_time()
    prepared = prepare_model(model, TARGET, CompileOptions(input_shapes=_shapes(shape)))
    artifact = build_artifact(model, prepared, reference=False)
    steps["cpu_after_import_s"] = time.process_time() - cpu_start
    for key, value in artifact.report["timings_s"].items():
        key = "passes_s" if key.startswith("pass_") else key
        steps[key] = steps.get(key, 0.0) + value
    if prepared.programs:
        start = time.perf_counter()
        build_artifact(model, prepared, reference=True)
        steps["reference_s"] = max(0.0, time.perf_counter() - start - steps["host_build_s"])
    start = time.perf_counter()
    artifact.save(Path(out_dir) / "model.vpuc")
    steps["write_s"] = time.perf_counter() - start
    return {k: round(v, 4) for k, v in steps.items()}


def repeated_worker(models: list[str], repeats: int) -> dict:
    """Compiles in one process, as a script calling compile_model or the sweep makes them: one
    warm-up compile of each model (TVM's and onnxruntime's first-use costs), then `repeats`
    timed compiles (the default options, reference deferred); the median wall and the median
    of each step (the driver's report keys, passes summed)."""
    from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model

    figures = {}
    for model in models:
        build_artifact(model, prepare_model(model, TARGET, CompileOptions()))
        walls, runs = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            artifact = build_artifact(model, prepare_model(model, TARGET, CompileOptions()))
            walls.append(time.perf_counter() - start)
            steps: dict[str, float] = {}
            for key, value in artifact.report["timings_s"].items():
                key = "passes_s" if key.startswith("pass_") else key
                steps[key] = steps.get(key, 0.0) + value
            runs.append(steps)
        steps = {k: round(statistics.median(r.get(k, 0.0) for r in runs), 4) for k in runs[0]}
        figures[model] = {"wall_s": round(statistics.median(walls), 4), "steps_s": steps}
    return figures


def _repeated(specs: dict[str, dict], repeats: int) -> dict:
    """repeated_worker in a fresh process over the QDQ models, keyed by model name."""
    names = [n for n, spec in specs.items() if spec["kind"] == "qdq"]
    paths = [str(specs[n]["path"]) for n in names]
    code = f"import json,sys; sys.path.insert(0,{str(Path(__file__).parent)!r}); import compile_time as c; "
    code += f"print(json.dumps(c.repeated_worker({paths!r}, {repeats})))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    rows = {}
    for name, path in zip(names, paths, strict=True):
        row = figures[path]
        row["ratio_vs_goal"] = round(row["wall_s"] / GOAL_REPEATED_S, 2)
        rows[name] = row
    return rows


_BYTECODE_PROBE = """
import importlib.util, json, os, sys
import vpuc.compiler.cli, vpuc.compiler.driver
files = [getattr(m, "__file__", None) or "" for m in list(sys.modules.values())]
sources = [f for f in files if f.endswith(".py")]
missing = [f for f in sources if not os.path.exists(importlib.util.cache_from_source(f))]
print(json.dumps({"modules": len(sources), "without_bytecode": len(missing)}))
"""


def _bytecode_cached() -> dict:
    """Whether a compile's imports read Python's bytecode cache (__pycache__/*.pyc): a fresh
    process imports what `vpuc compile` imports (TVM among them), which also writes the cache
    unless PYTHONDONTWRITEBYTECODE is set, then counts the modules loaded from .py sources
    whose .pyc is absent. Without the cache every CLI run compiles them again (0.25-0.35 s)."""
    probe = [sys.executable, "-c", _BYTECODE_PROBE]
    result = subprocess.run(probe, capture_output=True, text=True, check=True)
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    counts["bytecode_cached"] = counts["without_bytecode"] == 0
    counts["PYTHONDONTWRITEBYTECODE"] = os.environ.get("PYTHONDONTWRITEBYTECODE", "")
    return counts


def _wall(argv: list[str]) -> float:
    return _wall_and_cpu(argv)[0]


def _wall_and_cpu(argv: list[str]) -> tuple[float, float]:
    """The wall of one run of `argv` and its CPU time (user + system, its threads and
    children too): a loaded machine stretches the wall, hardly the CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"compile_time: {' '.join(argv)} failed: {result.stderr.strip()[-400:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


_VELA_IN_PROCESS = """
import contextlib, io, json, statistics, sys, tempfile, time
from ethosu.vela import vela
argv = [sys.argv[1], "--accelerator-config", "ethos-u55-256", "--output-dir", tempfile.mkdtemp()]
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        vela.main(argv)
    times.append(time.perf_counter() - start)
print(json.dumps(times))
"""


def _vela_s(tflite: Path | None, repeats: int) -> dict | None:
    """Vela's CLI wall (its process start included) and its compile proper: vela.main
    called in one process after its imports (the first call included, as a CLI run has it)."""
    if not VELA.exists() or tflite is None or not tflite.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(VELA), str(tflite), "--accelerator-config", "ethos-u55-256", "--output-dir", tmp]
        wall = statistics.median(_wall(argv) for _ in range(repeats))
    python = VELA.parent / "python"
    result = subprocess.run(
        [str(python), "-c", _VELA_IN_PROCESS, str(tflite), str(max(3, repeats))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    compile_s = statistics.median(json.loads(result.stdout.strip().splitlines()[-1]))
    return {"wall_s": round(wall, 4), "compile_s": round(compile_s, 4)}


def _measure(name: str, spec: dict, repeats: int, tmp: Path) -> dict:
    out = tmp / name
    out.mkdir()
    cli = [str(VPUC), "compile", str(spec["path"]), "--target", TARGET, "-o", str(out / "cli.vpuc")]
    shape = spec.get("input_shape")
    cli += ["--input-shape", shape] if shape else []
    cli_runs = [_wall_and_cpu(cli) for _ in range(repeats)]
    cli_s = statistics.median(wall for wall, _ in cli_runs)
    code = f"import json,sys; sys.path.insert(0,{str(Path(__file__).parent)!r}); import compile_time as c; "
    code += f"print(json.dumps(c.worker({str(spec['path'])!r}, {str(out)!r}, {shape!r})))"
    runs = []
    for _ in range(repeats):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    steps = {k: round(statistics.median(r.get(k, 0.0) for r in runs), 4) for k in runs[0]}
    after_tvm = cli_s - steps["import_tvm_s"]
    after_import = sum(v for k, v in steps.items() if not k.startswith(("import_", "cpu_")))
    row = {"kind": spec["kind"], "cli_wall_s": round(cli_s, 4), "after_tvm_import_s": round(after_tvm, 4)}
    row["cli_cpu_s"] = round(statistics.median(cpu for _, cpu in cli_runs), 4)
    row["steps_s"] = steps
    vela = _vela_s(spec["tflite"], repeats) if spec["tflite"] else None
    row["vela"] = vela
    peer = vela["compile_s"] if vela else RECORDED_VELA_S
    row["peer"] = "vela measured" if vela else "vela recorded 0.2-0.4 s"
    row["ratio_cli_vs_vela"] = round(cli_s / (vela["wall_s"] if vela else RECORDED_VELA_WALL_S), 2)
    row["ratio_after_import_vs_vela_compile"] = round(after_import / peer, 2)
    goal = {"qdq": GOAL_CLI_S, "float": GOAL_FLOAT_S, "vision": GOAL_VISION_S}[spec["kind"]]
    row["ratio_cli_vs_goal"] = round(cli_s / goal, 2)
    if spec["kind"] == "qdq":
        row["ratio_after_tvm_vs_goal"] = round(after_tvm / GOAL_AFTER_TVM_S, 2)
    return row


def _profile(model: Path, shape: str | None = None, top: int = 25) -> list[dict]:
    """cProfile of one compile after the imports: the top functions by cumulative time."""
    code = f"""
import cProfile, pstats, json, sys
from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
prof = cProfile.Profile()
prof.enable()
sys.path.insert(0, {str(Path(__file__).parent)!r})
from compile_time import _shapes
prepared = prepare_model({str(model)!r}, {TARGET!r}, CompileOptions(input_shapes=_shapes({shape!r})))
build_artifact({str(model)!r}, prepared, reference=False)
prof.disable()
stats = pstats.Stats(prof)
rows = []
for (file, line, fn), (cc, nc, tt, ct, callers) in stats.stats.items():
    rows.append({{"function": f"{{file.split('site-packages/')[-1].split('/work/')[-1]}}:{{line}}({{fn}})",
                 "cumulative_s": round(ct, 4), "own_s": round(tt, 4), "calls": nc}})
rows.sort(key=lambda r: -r["cumulative_s"])
print(json.dumps(rows[:{top}]))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    parser.add_argument("--profile", action="store_true", help="cProfile the slowest model")
    parser.add_argument("--vision", action="store_true", help="also the vision exports in VPUC_VISION")
    parser.add_argument(
        "--in-process", type=int, default=0, metavar="N",
        help="also time N repeated compiles of each QDQ model in one process (after a warm-up)",
    )  # fmt: skip
    args = parser.parse_args()
    load = os.getloadavg()
    bytecode = _bytecode_cached()  # before the timed runs: it also writes the cache they read
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        models = _models(tmp / "zoo", vision=args.vision or any(m in args.models for m in VISION_MODELS))
        named = [m for m in args.models.split(",") if m]
        chosen = [m for m in named if m in models] if named else list(models)
        for name in (m for m in named if m not in models and m not in VISION_MODELS):
            print(f"{name:28s} skipped: no such model")
        rows = {}
        for name in chosen:
            rows[name] = _measure(name, models[name], args.repeats, tmp)
            row = rows[name]
            print(
                f"{name:28s} cli {row['cli_wall_s']:6.2f} s (CPU {row['cli_cpu_s']:5.2f} s)  "
                f"after TVM {row['after_tvm_import_s']:6.2f} s  "
                f"x{row['ratio_cli_vs_vela']:5.1f} Vela's wall, "
                f"x{row['ratio_after_import_vs_vela_compile']:6.1f} its compile ({row['peer']})  "
                f"x{row['ratio_cli_vs_goal']:.2f} of goal"
            )
        figures = {"target": TARGET, "repeats": args.repeats, "loadavg_at_start": [round(x, 2) for x in load]}
        figures["cpu_count"] = os.cpu_count()
        figures["bytecode_cached"] = bytecode.pop("bytecode_cached")
        figures["bytecode"] = bytecode
        figures["models"] = rows
        if args.in_process:
            figures["in_process"] = _repeated({n: models[n] for n in chosen}, args.in_process)
            for name, row in figures["in_process"].items():
                wall, ratio = row["wall_s"], row["ratio_vs_goal"]
                print(f"{name:28s} in one process: {wall:6.2f} s per compile (x{ratio:.2f} of goal)")
        if args.profile and rows:
            slowest = max(rows, key=lambda n: rows[n]["cli_wall_s"])
            spec = models[slowest]
            figures["profile"] = {
                "model": slowest,
                "top_cumulative": _profile(spec["path"], spec.get("input_shape")),
            }
            for entry in figures["profile"]["top_cumulative"][:15]:
                print(f"  {entry['cumulative_s']:8.3f} s  {entry['function']}")
    figures["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    cached = "cached" if figures["bytecode_cached"] else "NOT cached (PYTHONDONTWRITEBYTECODE?)"
    path = write_json("compile_time", figures)
    print(f"wrote {path} (load average {figures['loadavg_at_start']}, bytecode {cached})")


if __name__ == "__main__":
    main()
