"""Tables never cut a number: in a narrow terminal they wrap, and written to a file or a
pipe every figure of the JSON report appears whole in the text."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from vpuc.compiler import compile_model


def test_run_tables_carry_every_figure_whole(zoo_dir, tmp_path):
    model = zoo_dir / "resnet_mini.onnx"
    artifact = compile_model(model, target="vpu", calib_synthetic=8, reference=False).save(
        tmp_path / "r.vpub"
    )
    args = [sys.executable, "-m", "vpuc.compiler.cli", "run", str(artifact)]
    as_json = json.loads(subprocess.run([*args, "--json"], capture_output=True, text=True, check=True).stdout)
    env = {**os.environ, "COLUMNS": "60"}  # a narrow terminal width, and stdout a pipe
    text = subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout
    assert "…" not in text
    flat = text.replace("\n", "").replace("│", "").replace(" ", "")
    for layer in as_json["layers"]:
        assert layer["name"].replace(" ", "") in flat and str(layer["cycles"]) in flat
    for sg in as_json["subgraphs"]:
        assert str(sg["cycles"]) in flat and str(sg["dram_read_bytes"]) in flat
