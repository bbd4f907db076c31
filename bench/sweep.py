"""Benchmark: what a `vpuc sweep` point costs, and how the sweep scales out.

    python bench/sweep.py [--model PATH] [--repeat 2]

On resnet8 (../shared/anchors) over 36 points (mac_rows 8,16,32 x sram_bytes 32K..512K x
dram_bytes_per_cycle 4,8,16), measures in one run:
    point / full compile   one point's back half + simulation (median, in this process,
                           after the front half) over a whole `vpuc compile` of the model
                           in this process (front half, back half, host build)    goal <= 0.2
    --jobs 2 wall          the 36-point sweep as a user runs it (a fresh process)  goal <= 180 s
    Ray / --jobs 2         the same sweep on a local Ray instance with 2 workers   goal <= 1.2
and that --jobs 2 and Ray give the same records. The machine's load average is recorded
beside the figures (it is shared: timings move with it). Writes bench/out/sweep.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write_json

REPO = Path(__file__).resolve().parents[1]
RESNET8 = REPO.parent / "shared" / "anchors" / "resnet8" / "resnet8_int8_qdq.onnx"
PARAMS = [
    "--param",
    "mac_rows=8,16,32",
    "--param",
    "sram_bytes=32K,64K,128K,512K",
    "--param",
    "dram_bytes_per_cycle=4,8,16",
]
GOALS = {"point_over_compile": 0.2, "jobs2_wall_s": 180.0, "ray_over_jobs2": 1.2}


def in_process(model: Path, repeat: int) -> dict:
    """Median wall of a full compile and of one point, both in this process (warm)."""
    from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
    from vpuc.compiler.sweep import space
    from vpuc.compiler.sweep.evaluate import evaluate, front_half
    from vpuc.targets import load_target

    base, options = load_target("vpu"), CompileOptions()
    compiles = []
    for _ in range(repeat + 1):  # the first warms TVM up
        start = time.perf_counter()
        build_artifact(model, prepare_model(model, base, options))
        compiles.append(time.perf_counter() - start)
    front = front_half(str(model), base, options)
    chosen = space.points([space.parse_param(p) for p in PARAMS[1::2]])[:: 36 // 6]
    points = []
    for point in chosen:
        start = time.perf_counter()
        record = evaluate(front, space.point_target(base, point))
        points.append(time.perf_counter() - start)
        assert record["status"] == "ok", record["reason"]
    return {
        "compile_s": statistics.median(compiles[1:]),
        "front_half_s": front.seconds,
        "point_s": statistics.median(points),
        "points_timed": len(points),
    }


def cli_sweep(model: Path, folder: Path, where: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vpuc.compiler.cli",
            "sweep",
            str(model),
            *PARAMS,
            "-o",
            str(folder),
            "--json",
            *where,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench/sweep.py: vpuc sweep {' '.join(where)} failed: {done.stderr.strip()}")
    return time.perf_counter() - start, json.loads(done.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=RESNET8)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    timed = in_process(args.model, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        jobs_s, jobs = cli_sweep(args.model, Path(tmp) / "jobs", ["--jobs", "2", "--no-plots"])
        ray_s, ray = cli_sweep(args.model, Path(tmp) / "ray", ["--ray", "--workers", "2", "--no-plots"])
    same = [(p["id"], p["figures"]) for p in jobs["points"]] == [
        (p["id"], p["figures"]) for p in ray["points"]
    ]
    figures = {
        **{k: round(v, 3) for k, v in timed.items()},
        "points": len(jobs["points"]),
        "jobs2_wall_s": round(jobs_s, 2),
        "ray2_wall_s": round(ray_s, 2),
        "ray_startup_s": ray["executor"].get("startup_s"),
        "point_over_compile": round(timed["point_s"] / timed["compile_s"], 3),
        "ray_over_jobs2": round(ray_s / jobs_s, 3),
        "jobs_and_ray_same_records": same,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "goals": GOALS,
    }
    for key, goal in GOALS.items():
        verdict = "ok" if figures[key] <= goal else "MISSED"
        print(f"{key:22s} {figures[key]:>8} (goal <= {goal}) {verdict}")
    print(
        f"jobs and Ray give the same records: {same}; load average {figures['load_average_before']}"
        f" -> {figures['load_average_after']} on {figures['cpus']} CPUs"
    )
    print(f"wrote {write_json('sweep', figures)}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
