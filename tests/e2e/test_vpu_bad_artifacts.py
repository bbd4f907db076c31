"""Artifacts that lie: a hand-edited manifest is refused with one line naming the key
(exit 2); a VPU program that faults in the simulator stops the run with one line naming
the subgraph, the layer and the instruction (exit 3: the artifact's checksums were
recomputed, so only a vpuc bug or an edit can cause it); never a traceback."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from vpuc.compiler import compile_model
from vpuc.runtime import Artifact
from vpuc.sim import Conv, Program


@pytest.fixture(scope="module")
def artifact(zoo_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "t.vpub"
    return compile_model(zoo_dir / "tinyconvnet.onnx", target="vpu", calib_synthetic=8, reference=False).save(
        path
    )


def _edited(artifact, tmp_path, edit) -> str:
    loaded = Artifact.load(artifact)
    manifest = copy.deepcopy(loaded.manifest)
    edit(manifest, loaded.members)
    return str(Artifact(manifest, dict(loaded.members)).save(tmp_path / "edited.vpub"))


EDITS = {
    "dram_bytes not an integer": (
        lambda m, _: m["vpu_programs"][0].update(dram_bytes="big"),
        "manifest vpu_programs[0].dram_bytes: missing or not a int",
    ),
    "program member missing": (
        lambda m, _: m["vpu_programs"][0].update(program="vpu/none.bin"),
        "manifest vpu_programs[0].program: member 'vpu/none.bin' is not in the artifact",
    ),
    "instruction count": (
        lambda m, _: m["vpu_programs"][0].update(instructions=3),
        "manifest vpu_programs[0].instructions: says 3, the program has",
    ),
    "input outside DRAM": (
        lambda m, _: m["vpu_programs"][0]["inputs"][0].update(dram_address=1 << 30),
        "manifest vpu_programs[0].inputs[0]: bytes",
    ),
    "input shape": (
        lambda m, _: m["inputs"][0].update(shape="1x3"),
        "manifest inputs[0].shape: must be a list",
    ),
    "hardware figure": (
        lambda m, _: m["target"]["hardware"].update(sram_bytes=-1),
        "manifest target: hardware.sram_bytes: -1 is out of range",
    ),
    "checkpoint after the last instruction": (
        lambda m, _: m["vpu_programs"][0]["checkpoints"]["tensors"][0].update(pc=1 << 20),
        "manifest vpu_programs[0].checkpoints.tensors[0].pc: 1048576 is past the program's",
    ),
    "checkpoint outside DRAM": (
        lambda m, _: m["vpu_programs"][0]["checkpoints"]["tensors"][0].update(memory="dram", address=1 << 30),
        "manifest vpu_programs[0].checkpoints.tensors[0]: bytes up to",
    ),
    "checkpoint memory": (
        lambda m, _: m["vpu_programs"][0]["checkpoints"]["tensors"][0].update(memory="flash"),
        "manifest vpu_programs[0].checkpoints.tensors[0].memory: 'flash' is not 'sram' or 'dram'",
    ),
    "checkpoint piece outside its tensor": (
        lambda m, _: m["vpu_programs"][0]["checkpoints"]["tensors"][0].update(pieces=[[0, 0, 1 << 30]]),
        "manifest vpu_programs[0].checkpoints.tensors[0].pieces[0]: [0, 0, 1073741824] is not [pc, offset,",
    ),
    "symbol twice": (
        lambda m, _: m["vpu_programs"].append(dict(m["vpu_programs"][0])),
        "is used twice",
    ),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_a_hand_edited_manifest_is_refused_with_one_line(vpuc, artifact, tmp_path, case):
    edit, message = EDITS[case]
    result = vpuc("run", _edited(artifact, tmp_path, edit))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_faulting_program_names_subgraph_layer_and_instruction(vpuc, artifact, tmp_path):
    def break_first_conv(manifest, members):
        entry = manifest["vpu_programs"][0]
        program = Program.from_bytes(members[entry["program"]])
        pc = next(k for k, i in enumerate(program.instructions) if isinstance(i, Conv))
        broken = list(program.instructions)
        broken[pc] = dataclasses.replace(broken[pc], src=(1 << 32) - 1024)
        members[entry["program"]] = Program(tuple(broken), program.layer_names).to_bytes()

    result = vpuc("run", _edited(artifact, tmp_path, break_first_conv))
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert "subgraph 0, layer 'stage1/conv'" in line and "pc " in line and "out of bounds" in line
