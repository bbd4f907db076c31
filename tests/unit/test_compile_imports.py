"""A compile loads only what it uses (issue 23): rich's progress bars only for --adaround,
onnx's reference evaluator only for a model with constants to fold, the HTML report's
modules only for --html. Each is 30-140 ms of a fresh process's imports, where a CLI
compile's goal is 0.5 s after TVM's import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tf2onnx"


def _loaded_after_cli_compile(model: Path, out: Path) -> set[str]:
    script = (
        "import sys\n"
        "from vpuc.compiler.cli import main\n"
        f"code = main(['compile', {str(model)!r}, '--target', 'vpu', '-o', {str(out)!r}])\n"
        "print(code, ','.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    code, modules = out.strip().splitlines()[-1].split(" ")
    assert code == "0"
    return set(modules.split(","))


def test_a_qdq_compile_loads_no_progress_bar_reference_evaluator_or_html_page(tmp_path):
    loaded = _loaded_after_cli_compile(FIXTURES / "tflite_dscnn.onnx", tmp_path / "m.vpuc")
    assert "vpuc.compiler.lower.codegen.tile_mac" in loaded  # it compiled
    assert "rich.progress" not in loaded
    assert "onnx.reference" not in loaded
    assert "vpuc.runtime.report_html" not in loaded
