"""One name for each figure across the compile, run and sim JSON reports (issue 22): a test
walks the keys of the three and refuses a second spelling of a figure another one names."""

from __future__ import annotations

import json

SPELLINGS = {  # a figure -> spellings it must not have in any report
    "mac_utilization": {"mac_utilisation", "mac_util"},
    "dram_write_bytes": {"dram_written_bytes", "dram_writes"},
}


PROGRAM = """\
# conv 8x8x16 -> 16, 3x3, then requant and store
.layer 1 conv1
load dram=0 sram=0 row_bytes=1024                     ; input
load dram=1024 sram=1024 row_bytes=2304 signal=0      ; weights: the DMA runs in order
load dram=4096 sram=4096 row_bytes=64 signal=3        ; multipliers
conv src=0 weights=1024 dst=8192 in_h=8 in_w=8 in_c=16 out_c=16 kernel_h=3 kernel_w=3 \
pad_top=1 pad_bottom=1 pad_left=1 pad_right=1 src_zp=-4 wait=0 signal=1
.layer 2 conv1.requant
requant src=8192 dst=16384 params=4096 pixels=64 channels=16 dst_zp=3 clamp_min=3 \
wait=1,3 signal=2
store dram=65536 sram=16384 row_bytes=1024 wait=2
end
""".replace("\\\n", "")  # tests/sim/test_sim_reports.py's conv program


def _keys(value, found: set[str]) -> set[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            found.add(key)
            _keys(item, found)
    elif isinstance(value, list):
        for item in value:
            _keys(item, found)
    return found


def test_compile_run_and_sim_reports_spell_each_figure_once(vpuc, zoo_dir, tmp_path):
    model = zoo_dir / "tinyconvnet.onnx"
    compiled = vpuc(
        "compile", model, "--target", "vpu", "-o", tmp_path / "m.vpub", "--json", "--no-reference"
    )
    assert compiled.returncode == 0, compiled.stderr
    ran = vpuc("run", tmp_path / "m.vpub", "--json")
    assert ran.returncode == 0, ran.stderr
    program = tmp_path / "p.s"
    program.write_text(PROGRAM)
    sim = vpuc("sim", program, "--target", "vpu", "--json")
    reports = {"compile": json.loads(compiled.stdout), "run": json.loads(ran.stdout)}
    if sim.returncode == 0:
        reports["sim"] = json.loads(sim.stdout)
    assert "sim" in reports, sim.stderr
    keys = {name: _keys(report, set()) for name, report in reports.items()}
    for figure, wrong in SPELLINGS.items():
        for name, found in keys.items():
            assert not (found & wrong), f"{name} JSON spells {figure} as {found & wrong}"
    for figure in SPELLINGS:
        assert figure in keys["compile"] and figure in keys["run"], figure
    assert "dram_write_bytes" in keys["sim"]
    run_sg, compile_sg = reports["run"]["subgraphs"][0], _compile_subgraphs(reports["compile"])[0]
    assert set(run_sg) - {"id"} <= set(compile_sg), set(run_sg) - set(compile_sg)


def _compile_subgraphs(report: dict) -> list[dict]:
    for value in report.values():
        if isinstance(value, dict) and isinstance(value.get("subgraphs"), list) and value["subgraphs"]:
            if isinstance(value["subgraphs"][0], dict) and "cycles" in value["subgraphs"][0]:
                return value["subgraphs"]
    raise AssertionError(f"no per-subgraph figures in the compile report ({sorted(report)})")
