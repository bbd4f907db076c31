"""The `vpuc` command line's shared options: graph passes, partitioning, calibration and
input shapes, each added to a subcommand's parser and read back into CompileOptions fields.
Nothing here imports TVM at module level (`vpuc --help` stays quick)."""

from __future__ import annotations

import argparse

# Calibration methods and defaults (compiler/quantize/calibration/ranges.py; a test keeps them equal):
# spelled here so that building the parser imports no TVM.
CALIB_METHODS = ("minmax", "percentile", "entropy", "mse", "auto")
DEFAULT_CALIB_METHOD = "percentile"
DEFAULT_PERCENTILE = 99.99
# QuantOptions' defaults (compiler/quantize/options.py; the same test keeps them equal).
QUANT_SWITCHES = {
    "equalize": False, "absorb_bias": False, "smoothquant": True, "adaround": False, "sensitivity": None
}  # fmt: skip
DEFAULT_ADAROUND_BUDGET_S = 1.0
DEFAULT_MIN_SQNR_DB = 25.0


def add_input_shape(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=D1xD2x...",
        help="fix an input's shape, e.g. input=1x3x224x224 (repeatable)",
    )
    parser.add_argument(
        "--bind-input",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="make an input a constant: a number, comma-separated numbers or a .npy (repeatable)",
    )


def add_pass_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("graph passes (docs/passes.md)")
    levels = group.add_mutually_exclusive_group()
    for level, what in (
        (0, "no graph passes"),
        (1, "cleanups only (fold, cse, dce)"),
        (2, "+ fusions"),
        (3, "+ NHWC layout (the default)"),
    ):
        levels.add_argument(
            f"-O{level}", dest="opt_level", action="store_const", const=level, help=what
        )  # fmt: skip
    group.set_defaults(opt_level=3)
    group.add_argument(
        "--disable-pass", action="append", default=[], metavar="NAME",
        help="skip the graph pass NAME (repeatable; `vpuc optimize --json` lists them)",
    )  # fmt: skip
    group.add_argument(
        "--opt-bisect-limit", type=int, metavar="N",
        help="run only the first N graph passes chosen (to find the pass that breaks a model)",
    )  # fmt: skip


def pass_options(args) -> dict:
    from vpuc.compiler.pipeline import PassSelection

    PassSelection(args.opt_level, tuple(args.disable_pass), args.opt_bisect_limit)  # checks the names
    return {
        "opt_level": args.opt_level,
        "disabled_passes": tuple(args.disable_pass),
        "opt_bisect_limit": args.opt_bisect_limit,
    }


def add_partition_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--min-subgraph-ops", type=int, default=1, metavar="N",
        help="VPU subgraphs with fewer ONNX ops stay on the CPU (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--no-profitability", action="store_true",
        help="keep every subgraph the op list allows on the VPU, whatever the cost model says",
    )  # fmt: skip


def add_calibration_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("quantisation (VPU targets; docs/quantization.md)")
    data = group.add_mutually_exclusive_group()
    data.add_argument(
        "--calib", metavar="X.npz", help="calibration samples: one stacked array per input name"
    )
    data.add_argument(
        "--calib-synthetic", type=int, metavar="N",
        help="N seeded synthetic samples (the default, 32: accuracy figures then mean little)",
    )  # fmt: skip
    group.add_argument(
        "--held-out", type=int, metavar="K",
        help="samples that measure accuracy, never calibrated on: the last K of --calib's, or K "
        "fresh synthetic ones (default: the last 20%% of a file's; max(8, N/4) synthetic)",
    )  # fmt: skip
    group.add_argument("--calib-method", choices=CALIB_METHODS, help=f"(default {DEFAULT_CALIB_METHOD})")
    group.add_argument(
        "--percentile", type=float, help=f"for --calib-method percentile (default {DEFAULT_PERCENTILE})"
    )
    _add_method_options(group)


def _add_method_options(group) -> None:
    on_off = argparse.BooleanOptionalAction
    for flag, field_, what in (
        ("--bias-correction", None, "correct each conv/dense bias for its int8 weights' mean error"),
        ("--equalize", "equalize", "cross-layer equalisation of conv/dense -> relu -> conv/dense chains"),
        ("--absorb-bias", "absorb_bias", "bias absorption across such chains"),
        ("--smoothquant", "smoothquant", "migrate dense-input outliers into the weights (SmoothQuant)"),
        ("--adaround", "adaround", "learn the rounding of conv/dense weights (AdaRound)"),
        ("--sensitivity", "sensitivity", "report each layer's output SQNR when it alone is int8"),
    ):  # fmt: skip
        switch = True if field_ is None else QUANT_SWITCHES[field_]
        state = (
            "on where its passes are cheap, docs/quantization.md"
            if switch is None
            else "on"
            if switch
            else "off"
        )
        group.add_argument(flag, action=on_off, default=None, help=f"{what} (default {state})")
    group.add_argument(
        "--smoothquant-alpha", type=_alpha, default=None, metavar="A",
        help="SmoothQuant migration strength in (0, 1), or 'auto': chosen per tensor (the default)",
    )  # fmt: skip
    group.add_argument(
        "--adaround-budget", type=float, default=None, metavar="SECONDS",
        help=f"compile time AdaRound may spend, all layers together (default {DEFAULT_ADAROUND_BUDGET_S})",
    )  # fmt: skip
    group.add_argument(
        "--keep-float", action="append", default=[], metavar="NODE",
        help="keep the layer computing this ONNX node in float on the CPU (repeatable)",
    )  # fmt: skip
    group.add_argument(
        "--min-sqnr", type=_floor, default=DEFAULT_MIN_SQNR_DB, metavar="DB",
        help="keep the most sensitive layers in float until the output SQNR on the held-out "
        f"samples reaches DB; 'off' to disable (default {DEFAULT_MIN_SQNR_DB:g})",
    )  # fmt: skip
    group.add_argument(
        "--accept-low-sqnr", action="store_true",
        help="write the artifact even when --min-sqnr cannot be reached (with a warning)",
    )  # fmt: skip


def _alpha(text: str) -> float | None:
    if text.strip().lower() == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1) or 'auto', got {text!r}") from None


def _floor(text: str) -> float | None:
    if text.strip().lower() == "off":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of dB or 'off', got {text!r}") from None


def calibration_options(args, target) -> dict:
    from dataclasses import replace

    from vpuc.compiler.errors import CompileError
    from vpuc.compiler.quantize import QuantOptions

    given = {
        "--calib": args.calib,
        "--calib-synthetic": args.calib_synthetic,
        "--held-out": args.held_out,
        "--calib-method": args.calib_method,
        "--percentile": args.percentile,
        "--bias-correction": args.bias_correction,
        **{f"--{name.replace('_', '-')}": getattr(args, name) for name in QUANT_SWITCHES},
        "--smoothquant-alpha": args.smoothquant_alpha,
        "--adaround-budget": args.adaround_budget,
        "--keep-float": args.keep_float or None,
    }
    used = [flag for flag, value in given.items() if value is not None]
    if used and not target.has_vpu:
        raise CompileError(
            f"{used[0]}: target '{target.name}' has no VPU, so nothing is quantised "
            "(calibration options are for VPU targets such as --target vpu)"
        )
    if args.percentile is not None and args.calib_method not in (None, "percentile"):
        raise CompileError(f"--percentile: only used by --calib-method percentile, not {args.calib_method}")
    chosen = {
        name: getattr(args, name)
        for name in ("equalize", "absorb_bias", "smoothquant", "adaround", "sensitivity")
        if getattr(args, name) is not None
    }
    quant_options = replace(
        QuantOptions(),
        **chosen,
        smoothquant_alpha=args.smoothquant_alpha,
        adaround_budget_s=DEFAULT_ADAROUND_BUDGET_S if args.adaround_budget is None else args.adaround_budget,
        keep_float=tuple(args.keep_float),
        min_sqnr_db=args.min_sqnr,
        accept_below_floor=args.accept_low_sqnr,
    )
    return {
        "calib": args.calib,
        "calib_synthetic": args.calib_synthetic,
        "held_out": args.held_out,
        "calib_method": args.calib_method or DEFAULT_CALIB_METHOD,
        "percentile": DEFAULT_PERCENTILE if args.percentile is None else args.percentile,
        "bias_correction": args.bias_correction is not False,
        "quant_options": quant_options,
    }


def partition_options(args) -> dict:
    from vpuc.compiler.errors import CompileError

    if args.min_subgraph_ops < 1:
        raise CompileError(f"--min-subgraph-ops: must be at least 1, got {args.min_subgraph_ops}")
    return {"min_subgraph_ops": args.min_subgraph_ops, "profitability": not args.no_profitability}


def bound_inputs(specs: list[str]) -> dict[str, str]:
    from vpuc.compiler.frontend import parse_bind_input

    return dict(parse_bind_input(spec) for spec in specs)


def input_shapes(specs: list[str]) -> dict[str, tuple[int, ...]]:
    from vpuc.compiler.errors import CompileError
    from vpuc.compiler.frontend.shapes import parse_input_shape

    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, dims = parse_input_shape(spec)
        if shapes.get(name, dims) != dims:
            first, second = ("x".join(map(str, d)) for d in (shapes[name], dims))
            raise CompileError(f"--input-shape {name}: given twice, as {first} and {second}")
        shapes[name] = dims
    return shapes


def selection_fields(options: dict) -> dict:
    return {
        "opt_level": options["opt_level"],
        "disabled": options["disabled_passes"],
        "limit": options["opt_bisect_limit"],
    }
