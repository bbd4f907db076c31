"""`vpuc --help` and `vpuc --version` answer without importing TVM (which takes over a
second), numpy or the simulator: the CLI imports what a command needs when the command runs,
and its own start stays under 0.3 s of CPU time (issue 23)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

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
    # the CLI's error types (vpuc.runtime.errors) no longer bring numpy and onnx (0.15 s)
    assert "numpy" not in loaded and "onnx" not in loaded
    assert "vpuc.targets.loader" in loaded  # it ran


def _exit_and_imports(argv: list[str]) -> tuple[int, str, set[str]]:
    """A fresh process runs main(argv): its exit code, its stderr and the modules it loaded."""
    script = (
        "import sys\n"
        "from vpuc.compiler.cli import main\n"
        f"code = main({argv!r})\n"
        "print(code, ','.join(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    code, modules = done.stdout.strip().splitlines()[-1].split(" ")
    return int(code), done.stderr, set(modules.split(","))


TESTS = str(Path(__file__).resolve().parents[1])
MODEL = f"{TESTS}/fixtures/tf2onnx/tflite_dscnn.onnx"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compile", "nowhere/missing.onnx", "--target", "vpu"], "vpuc compile: nowhere/missing.onnx: no such file"),
        (["compile", TESTS, "--target", "vpu"], f"vpuc compile: {TESTS}: is a directory, not an ONNX file"),
        (["compile", MODEL, "--target", "nosuch"], "vpuc compile: unknown target 'nosuch'"),
        (["compile", MODEL, "--target", "vpu", "-o", TESTS], f"vpuc compile: {TESTS}: is a directory; give -o"),
        (
            ["compile", MODEL, "--target", "vpu", "--reference", "--no-reference"],
            "vpuc compile: --reference and --no-reference exclude each other",
        ),
        (["partition", "nowhere/missing.onnx"], "vpuc partition: nowhere/missing.onnx: no such file"),
        (["optimize", "nowhere/missing.onnx"], "vpuc optimize: nowhere/missing.onnx: no such file"),
        (["tune", "nowhere/missing.onnx", "--target", "nosuch"], "vpuc tune: unknown target 'nosuch'"),
    ],
)  # fmt: skip
def test_argument_errors_are_answered_before_tvm_is_imported(argv, message):
    """A missing model, an unknown target, a bad -o or flags that exclude each other: exit 2
    with the one line, without the compiler's imports (TVM's alone is 0.7 s; issue 23)."""
    code, stderr, loaded = _exit_and_imports(argv)
    assert code == 2 and stderr.startswith(message), stderr
    assert "tvm" not in loaded and "onnxruntime" not in loaded


def test_the_frontend_package_imports_its_modules_when_asked():
    """vpuc.compiler.frontend exports its names lazily (so that load.check_model_path comes
    without TVM): each resolves to its module's own object, and an unknown name still fails."""
    code = (
        "import vpuc.compiler.frontend as f\nimport sys\nassert 'tvm' not in sys.modules\n"
        "from vpuc.compiler.frontend import bind, importer, load, shapes\n"
        "modules = {'importer': importer, 'load': load, 'shapes': shapes, 'bind': bind}\n"
        "assert sorted(f.__all__) == sorted(f._EXPORTS)\n"
        "for name, module in f._EXPORTS.items():\n"
        "    assert getattr(f, name) is getattr(modules[module], name), name\n"
        "try:\n    f.no_such_name\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


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
