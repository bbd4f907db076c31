"""What a run reports: statistics (bytes, MACs, SRAM peak, layers, stalls, host link), the
Chrome trace, the assembly/binary round trip, the CLI, and docs/isa.md's field tables."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from vpuc.sim import Program, Simulator, assemble, disassemble, to_chrome_trace
from vpuc.sim.commands import (
    add_asm_arguments,
    add_disasm_arguments,
    add_sim_arguments,
    asm_command,
    disasm_command,
    sim_command,
)
from vpuc.sim.errors import AsmError, DecodeError
from vpuc.targets.isa.formats import FORMATS, markdown_table

REPO = Path(__file__).resolve().parents[2]

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
""".replace("\\\n", "")


def dram_image() -> np.ndarray:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, 8192).astype(np.uint8)
    image[4096:4160] = np.full(16, 0.004, np.float32).view(np.uint8)
    return image


@pytest.fixture
def result(vpu):
    program = assemble(PROGRAM, source="conv.s")
    return Simulator(vpu).run(program, dram_image(), host_to_vpu_bytes=8192, vpu_to_host_bytes=1024)


def test_statistics_add_up(vpu, result):
    stats = result.stats
    assert stats.instructions == 7
    assert stats.dram_read_bytes == 1024 + 2304 + 64 and stats.dram_written_bytes == 1024
    assert stats.macs == 64 * 16 * 9 * 16
    assert stats.sram_peak_bytes == 16384 + 1024
    mac = stats.units["MAC"]
    assert stats.mac_utilisation == stats.macs / (mac.busy_cycles * 256)
    assert stats.total_cycles == max(layer.end_cycle for layer in stats.layers)
    assert [(layer.layer, layer.name) for layer in stats.layers] == [(1, "conv1"), (2, "conv1.requant")]
    assert sum(layer.macs for layer in stats.layers) == stats.macs
    assert stats.units["MAC"].stall_cycles["wait_dma"] == result.timeline.start[3]
    assert stats.host_link_cycles == vpu.hardware.host_link_cycles(8192) + vpu.hardware.host_link_cycles(1024)
    assert json.loads(json.dumps(stats.to_json()))["layers"][1]["name"] == "conv1.requant"


def test_chrome_trace_has_a_track_per_unit_and_a_slice_per_instruction(result):
    trace = json.loads(json.dumps(to_chrome_trace(result)))
    events = trace["traceEvents"]
    tracks = {e["args"]["name"]: e["tid"] for e in events if e["name"] == "thread_name"}
    assert set(tracks) == {"DMA", "MAC", "VEC"}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 6  # END draws nothing
    conv = next(e for e in slices if e["args"]["pc"] == 3)
    assert conv["tid"] == tracks["MAC"] and conv["dur"] == result.plans[3].cycles / 1000
    assert conv["ts"] == result.timeline.start[3] / 1000
    flows = [e for e in events if e.get("cat") == "token"]
    assert len(flows) == 2 * len(result.timeline.edges) == 2 * 4
    # each arrow end lies strictly inside the slice of its own instruction (signaller, waiter)
    pairs = zip(flows[::2], flows[1::2], strict=True)
    for (producer, consumer, _), (start, end) in zip(result.timeline.edges, pairs, strict=True):
        for flow, pc in ((start, producer), (end, consumer)):
            inside = [
                e["args"]["pc"]
                for e in slices
                if e["tid"] == flow["tid"] and e["ts"] < flow["ts"] < e["ts"] + e["dur"]
            ]
            assert inside == [pc]


def test_assembly_and_binary_round_trip():
    program = assemble(PROGRAM)
    assert Program.from_bytes(program.to_bytes()) == program
    assert assemble(disassemble(program)) == program
    assert program.layer_names == {1: "conv1", 2: "conv1.requant"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vadd src=0\n", "p.s:1: unknown mnemonic 'vadd'"),
        ("clip src=0 dst=0 count=1 colour=2\n", "p.s:1: clip: unknown operand 'colour=2'"),
        ("\n\nclip src=0 dst=0\n", "p.s:3: clip: missing field 'count'"),
        ("clip src=zero dst=0 count=1\n", "p.s:1: field 'src': 'zero' is not an integer"),
        ("clip src=0 dst=0 count=1 wait=16\n", "p.s:1: field 'wait': token 16 is not in 0..15"),
        (".layer 1 a\n.layer 1 b\n", "p.s:2: layer 1 is already named 'a'"),
        (".section x\n", "p.s:1: unknown directive '.section x'"),
    ],
)
def test_assembly_errors_name_file_and_line(text, message):
    with pytest.raises(AsmError, match=message):
        assemble(text, source="p.s")


def test_binary_errors():
    blob = assemble(PROGRAM).to_bytes()
    with pytest.raises(DecodeError, match="not a VPU program"):
        Program.from_bytes(b"ELF" + blob)
    with pytest.raises(DecodeError, match="the header says"):
        Program.from_bytes(blob[:-3])


def _cli(add, command, argv):
    parser = argparse.ArgumentParser()
    add(parser)
    return command(parser.parse_args(argv))


def test_cli_sim_json_trace_and_disasm(tmp_path, capsys):
    source, image = tmp_path / "conv.s", tmp_path / "dram.bin"
    source.write_text(PROGRAM)
    image.write_bytes(dram_image().tobytes())
    trace = tmp_path / "trace.json"
    argv = [str(source), "--target", "vpu", "--dram", str(image), "--json", "--trace", str(trace)]
    assert _cli(add_sim_arguments, sim_command, argv) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["macs"] == 64 * 16 * 9 * 16 and stats["target"] == "vpu"
    assert json.loads(trace.read_text())["traceEvents"]
    assert _cli(add_sim_arguments, sim_command, [str(source)]) == 0
    assert "total cycles" in capsys.readouterr().out
    binary = tmp_path / "conv.bin"
    assert _cli(add_asm_arguments, asm_command, [str(source), "-o", str(binary)]) == 0
    assert _cli(add_disasm_arguments, disasm_command, [str(binary)]) == 0
    assert assemble(capsys.readouterr().out) == assemble(PROGRAM)


@pytest.mark.parametrize(
    ("program", "target", "message"),
    [
        (
            "clip src=0 dst=0 count=1\nadd src_a=524280 src_b=0 dst=0 count=64 scale_a=1 scale_b=1\nend\n",
            "vpu",
            "vpuc sim: {path}:2: pc 1 'add src_a=524280 src_b=0 dst=0 count=64 scale_a=1.0 "
            "scale_b=1.0': SRAM read of 'src_a' [524280, 524344) out of bounds (512 KiB)",
        ),
        (
            "clip src=0 dst=0 count=1\n",
            "vpu",
            "vpuc sim: {path}:1: pc 0 'clip src=0 dst=0 count=1': the program ends without END",
        ),
        ("end\n", "cpu", "vpuc sim: target 'cpu' has no VPU (kind 'cpu')"),
        ("end\n", "nope", "vpuc sim: unknown target 'nope'"),
        ("end x=1\n", "vpu", "vpuc sim: {path}:1: end: unknown operand 'x=1'"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, capsys, program, target, message):
    path = tmp_path / "p.s"
    path.write_text(program)
    assert _cli(add_sim_arguments, sim_command, [str(path), "--target", target]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(message.format(path=path)) and captured.err.count("\n") == 1


def test_cli_disasm_of_a_bad_file(tmp_path, capsys):
    path = tmp_path / "p.bin"
    path.write_bytes(b"VPUP" + bytes(12) + bytes(64))
    assert _cli(add_disasm_arguments, disasm_command, [str(path)]) == 2
    assert "program version 0" in capsys.readouterr().err


def test_docs_carry_the_field_table_of_every_format_and_a_program_that_runs(vpu):
    doc = (REPO / "docs" / "isa.md").read_text()
    for cls in set(FORMATS.values()):
        assert markdown_table(cls) in doc, f"docs/isa.md: the table of {cls.__name__} is stale"
    example = doc.split("### Assembly", 1)[1].split("```\n", 2)[1]
    assert assemble(example) == assemble(PROGRAM)
    Simulator(vpu).run(assemble(example), dram_image())
