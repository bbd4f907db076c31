"""`vpuc --help` and `vpuc --version` answer without importing TVM (which takes over a
second), numpy or the simulator: the CLI imports what a command needs when the command runs,
and its own start stays under 0.3 s of CPU time (issue 23)."""

from __future__ import annotations

import resource
import subprocess
import sys

from vpuc.compiler import cli_options


def _imports_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint(','.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return set(out.strip().splitlines()[-1].split(","))


def test_help_does_not_import_tvm():
    loaded = _imports_after(
        "from vpuc.compiler.cli import main\n"
        "for argv in (['--help'], ['compile', '--help'], ['run', '--help'], ['--version']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass"
    )
    assert "tvm" not in loaded and "onnxruntime" not in loaded and "onnx" not in loaded
    assert not {"numpy", "rich", "vpuc.sim.simulator", "vpuc.targets.isa"} & loaded


def test_targets_does_not_import_tvm():
    """`vpuc targets` reads the TOML targets: no compiler stage, so no TVM (issue 23)."""
    loaded = _imports_after(
        "from vpuc.compiler.cli import main\ntry:\n    main(['targets'])\nexcept SystemExit:\n    pass"
    )
    assert "tvm" not in loaded and "onnxruntime" not in loaded
    assert "vpuc.targets.loader" in loaded  # it ran


START_LIMIT_S = 0.3  # issue 23: the CLI's own start, beyond the interpreter's


def _child_cpu_s(code: str) -> float:
    """User + system CPU time of one `python -c code` (CPU time, not wall: a loaded machine
    stretches the wall, hardly the CPU time a process needs)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_cli_start_is_within_its_limit():
    """`vpuc --help` costs under START_LIMIT_S of CPU beyond a bare interpreter's start
    (the best of three of each, so that a busy neighbour does not decide it)."""
    help_code = "from vpuc.compiler.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    cli = min(_child_cpu_s(help_code) for _ in range(3))
    bare = min(_child_cpu_s("pass") for _ in range(3))
    assert cli - bare < START_LIMIT_S, (
        f"the CLI's start takes {cli - bare:.2f} s of CPU (limit {START_LIMIT_S} s)"
    )


def test_version(vpuc):
    result = vpuc("--version")
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("vpuc 0.") and "apache-tvm 0.27" in line and "onnxruntime" in line


def test_calibration_choices_match_the_quantiser():
    """The CLI spells the calibration methods itself (so that --help imports no TVM)."""
    from vpuc.compiler import quantize

    assert cli_options.CALIB_METHODS == quantize.METHODS
    assert cli_options.DEFAULT_CALIB_METHOD == quantize.DEFAULT_METHOD
    assert cli_options.DEFAULT_PERCENTILE == quantize.DEFAULT_PERCENTILE


def test_quantiser_defaults_match_the_quantiser():
    """--help's defaults for the quantiser's methods, spelled in the CLI for the same reason."""
    from vpuc.compiler.quantize import QuantOptions
    from vpuc.compiler.quantize.options import DEFAULT_ADAROUND_BUDGET_S, DEFAULT_MIN_SQNR_DB

    default = QuantOptions()
    assert cli_options.QUANT_SWITCHES == {name: getattr(default, name) for name in cli_options.QUANT_SWITCHES}
    assert set(cli_options.QUANT_SWITCHES) == {
        "equalize",
        "absorb_bias",
        "smoothquant",
        "adaround",
        "sensitivity",
    }
    assert (cli_options.DEFAULT_ADAROUND_BUDGET_S, cli_options.DEFAULT_MIN_SQNR_DB) == (
        DEFAULT_ADAROUND_BUDGET_S,
        DEFAULT_MIN_SQNR_DB,
    )
