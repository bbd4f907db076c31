"""A compile loads only what it uses (issue 23): rich's progress bars only for --adaround,
onnx's reference evaluator only for a model with constants to fold. Each is 30-90 ms of a
fresh process's imports, where a CLI compile's goal is 0.5 s after TVM's import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tf2onnx"


def _loaded_after_compile(model: Path) -> set[str]:
    script = (
        "import sys\n"
        "from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model\n"
        f"m = {str(model)!r}\n"
        "build_artifact(m, prepare_model(m, 'vpu', CompileOptions()))\n"
        "print(','.join(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return set(out.strip().splitlines()[-1].split(","))


def test_a_qdq_compile_loads_no_progress_bar_nor_reference_evaluator():
    loaded = _loaded_after_compile(FIXTURES / "tflite_dscnn.onnx")
    assert "vpuc.compiler.lower.codegen.tile_mac" in loaded  # it compiled
    assert "rich.progress" not in loaded
    assert "onnx.reference" not in loaded
