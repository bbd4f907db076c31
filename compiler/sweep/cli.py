"""`vpuc sweep MODEL... --target BASE --param KEY=v1,v2,... -o DIR`: the command.

compiler/cli.py builds the parser and calls `add_command`. Exit 0 when the sweep ran (a
point that is infeasible is a result, not an error), 2 for a user error (a bad --param,
target, model or option: before any point runs), 3 for a bug in vpuc.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path


def add_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="sweep VPU design parameters through the compiler (docs/sweep.md)")
    p.add_argument("models", metavar="MODEL", nargs="+", help="ONNX model files")
    p.add_argument("--target", default="vpu", help="the base target, a name or a .toml (default: vpu)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a hardware figure or ops.<kind>=on,off and its values (64K, 1M allowed); repeat for more",
    )
    p.add_argument("--samples", type=int, metavar="N", help="N points of the grid at random instead of all")
    p.add_argument("--latin", action="store_true", help="with --samples: a Latin hypercube")
    p.add_argument("--seed", type=int, default=0, help="the seed of --samples (default 0)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-j", "--jobs", type=int, default=1, metavar="N", help="local worker processes")
    where.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run points on Ray: a local instance, or the cluster at ADDRESS (needs vpuc[ray])",
    )
    p.add_argument("--workers", type=int, metavar="N", help="with --ray: workers (default: the CPUs)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder of results (resumable)")
    p.add_argument("--no-plots", action="store_true", help="write no SVG/PNG plots")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    p.set_defaults(handler=sweep_command)


def sweep_command(args) -> int:
    from vpuc.compiler.driver import VPUC_VERSION, CompileOptions
    from vpuc.compiler.sweep import execute, output, pareto, space, store
    from vpuc.compiler.sweep.evaluate import front_half
    from vpuc.targets import load_target

    if args.jobs < 1 or (args.workers is not None and args.workers < 1):
        raise space.SweepError("--jobs/--workers: must be at least 1")
    if args.latin and args.samples is None:
        raise space.SweepError("--latin: needs --samples N")
    if not args.param:
        raise space.SweepError("--param: give at least one, such as --param mac_rows=8,16,32")
    params = [space.parse_param(text) for text in args.param]
    chosen = space.points(params, args.samples, args.latin, args.seed)
    base = load_target(args.target)
    if not base.has_vpu:
        raise space.SweepError(f"--target {args.target}: has no VPU, nothing to sweep")
    targets = [space.point_target(base, point) for point in chosen]  # each checked like a file
    models = [_model(path) for path in args.models]
    folder = Path(args.output)
    if folder.exists() and not folder.is_dir():
        raise space.SweepError(f"-o {folder}: exists and is not a folder")
    options = CompileOptions()
    start = time.perf_counter()
    known = store.load(folder)
    keys, tasks, task_of = {}, [], {}
    for m, (_, sha) in enumerate(models):
        for i, target in enumerate(targets):
            keys[(m, i)] = key = store.record_key(VPUC_VERSION, sha, repr(options), target)
            if key not in known:
                task_of[len(tasks)] = (m, i)
                tasks.append((len(tasks), m, target))
    fronts = [front_half(str(path), base, options) for path, _ in models] if tasks else []
    front_s = time.perf_counter() - start
    appender = store.Appender(folder)
    try:
        with _progress(len(tasks)) as advance:

            def on_record(index: int, record: dict) -> None:
                m, i = task_of[index]
                record = {"key": keys[(m, i)], **record}
                known[record["key"]] = record
                appender.add(record)
                advance()

            if not tasks:
                executor = {"kind": "none", "workers": 0}
            elif args.ray is not None:
                executor = execute.run_ray(fronts, tasks, args.ray or None, args.workers, on_record)
            elif args.jobs > 1:
                executor = execute.run_local(fronts, tasks, args.jobs, on_record)
            else:
                executor = execute.run_serial(fronts, tasks, on_record)
    finally:
        appender.close()
    points = []
    for m, (path, _) in enumerate(models):
        rows = []
        for i, point in enumerate(chosen):
            r = known[keys[(m, i)]]
            rows.append(
                {
                    "model": path.stem,
                    "id": space.point_id(point),
                    "point": point,
                    "target": targets[i].name,
                    "status": r["status"],
                    "reason": r["reason"],
                    "figures": r["figures"],
                    "timings": r.get("timings", {}),
                }
            )
        ok = [r for r in rows if r["status"] == "ok"]
        for index in pareto.front([r["figures"] for r in ok]):
            ok[index]["pareto"] = True
        points += rows
    result = {
        "models": [path.stem for path, _ in models],
        "base_target": base.name,
        "params": [p.key for p in params],
        "points": points,
        "summary": {
            "points": len(points),
            **{s: sum(r["status"] == s for r in points) for s in ("ok", "infeasible", "failed")},
            "computed": len(tasks),
            "reused": len(points) - len(tasks),
        },
        "executor": executor,
        "front_half_s": round(front_s, 3),
        "wall_s": round(time.perf_counter() - start, 3),
        "vpuc_version": VPUC_VERSION,
    }
    for i, target in enumerate(targets):
        (folder / "targets").mkdir(exist_ok=True)
        (folder / "targets" / f"{space.point_id(chosen[i])}.toml").write_text(space.point_toml(target))
    output.write_json(result, folder)
    output.write_csv(result, folder)
    result["plots"] = [] if args.no_plots else output.write_plots(result, folder)
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        output.print_table(result)
    return 0


def _model(path_text: str) -> tuple[Path, str]:
    from vpuc.compiler.sweep.space import SweepError

    path = Path(path_text)
    if not path.is_file():
        raise SweepError(f"{path}: model file not found")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


class _progress:
    """A progress bar on stderr with the time left (only on a terminal)."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(stderr=True)
        self.progress = Progress(
            "sweep",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            "left",
            TimeRemainingColumn(),
            console=console,
            disable=not console.is_terminal,
        )
        self.task = self.progress.add_task("points", total=total)

    def __enter__(self):
        self.progress.start()
        return lambda: self.progress.advance(self.task)

    def __exit__(self, *exc) -> None:
        self.progress.stop()
