"""Targets load from TOML, inherit, and reject bad files naming the file and the key."""

from pathlib import Path

import pytest

from vpuc.targets import TargetError, builtin_target_names, load_target


def test_builtin_targets_load():
    assert {"cpu", "vpu", "vpu-plus"} <= set(builtin_target_names())
    vpu = load_target("vpu")
    assert vpu.kind == "vpu" and vpu.has_vpu
    hw = vpu.hardware
    # The figures the foundation issue fixes for the reference VPU.
    assert (hw.mac_rows, hw.mac_cols, hw.sram_bytes, hw.dram_bytes_per_cycle, hw.vector_lanes) == (
        16, 16, 512 * 1024, 16, 32,
    )  # fmt: skip
    assert load_target("cpu").hardware is None


def test_vpu_plus_inherits_and_overrides():
    base, plus = load_target("vpu"), load_target("vpu-plus")
    assert plus.inherits == ("vpu",)
    assert (plus.hardware.mac_rows, plus.hardware.mac_cols) == (32, 32)
    assert plus.hardware.sram_bytes == 2 * 1024 * 1024
    assert plus.hardware.dram_bytes_per_cycle == 2 * base.hardware.dram_bytes_per_cycle
    assert plus.hardware.has_lut and not base.hardware.has_lut
    # Inherited unchanged:
    assert plus.hardware.host_link_bytes_per_cycle == base.hardware.host_link_bytes_per_cycle


def test_dram_cycles_is_latency_plus_bytes_at_least_a_burst():
    hw = load_target("vpu").hardware  # 32-byte bursts at 16 bytes per cycle
    assert (hw.dram_burst_bytes, hw.dram_bytes_per_cycle) == (32, 16)
    assert hw.dram_cycles(1) == hw.issue_cycles + hw.dram_latency_cycles + 2  # a whole burst
    assert hw.dram_cycles(32) == hw.issue_cycles + hw.dram_latency_cycles + 2
    # a burst of 32 and one of 1: 33 bytes at 16 a cycle, 3 cycles (not two whole bursts, 4)
    assert hw.dram_cycles(33) == hw.issue_cycles + hw.dram_latency_cycles + 3


def test_burst_and_weight_load_default_when_a_file_omits_them(tmp_path):
    base = tmp_path / "base.toml"
    text = Path(load_target("vpu").source).read_text()
    base.write_text(text.replace("dram_burst_bytes = 32", "").replace("mac_weight_load_cycles = 16", ""))
    hw = load_target(base).hardware
    assert hw.dram_burst_bytes == hw.dram_bytes_per_cycle and hw.mac_weight_load_cycles == hw.mac_rows


def test_target_by_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('[target]\nname = "mine"\ninherit = "vpu"\n[hardware]\nsram_bytes = 65536\n')
    target = load_target(path)
    assert target.name == "mine" and target.hardware.sram_bytes == 65536
    assert target.hardware.mac_rows == 16


def test_unknown_target_name():
    with pytest.raises(TargetError, match=r"unknown target 'npu9'.*cpu, .*vpu, vpu-plus"):
        load_target("npu9")


BAD_FILES = [
    ('[target]\nname = "x"\nkind = "vpu"\n', r"hardware: a vpu target needs"),
    ('[target]\nname = "x"\nkind = "gpu"\n', r"target\.kind: 'gpu' is not one of"),
    ('[target]\nname = "x"\ninherit = "vpu"\n[hardware]\nmac_rows = 0\n', r"hardware\.mac_rows: 0 is out of range"),
    ('[target]\nname = "x"\ninherit = "vpu"\n[hardware]\nmac_rows = "16"\n', r"hardware\.mac_rows: must be an integer"),
    ('[target]\nname = "x"\ninherit = "vpu"\n[hardware]\nmac_rowz = 16\n', r"hardware\.mac_rowz: unknown key"),
    ('[target]\nname = "x"\ninherit = "vpu"\n[numerics]\nrequant = "float64"\n', r"numerics\.requant: 'float64'"),
    ('[target]\nkind = "cpu"\n', r"target\.name: missing"),
    ('[target]\nname = "x"\nkind = "cpu"\n[gpu]\na = 1\n', r"gpu: unknown table"),
    ("[target\nname=", r"not valid TOML"),
    ('[target]\nname = "x"\ninherit = "nothere.toml"\n', r"nothere\.toml: target file not found"),
]  # fmt: skip


@pytest.mark.parametrize("text,message", BAD_FILES)
def test_bad_target_file_names_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TargetError, match=message) as info:
        load_target(path)
    assert str(path.parent) in str(info.value)


def test_inheritance_cycle(tmp_path):
    (tmp_path / "a.toml").write_text('[target]\nname = "a"\ninherit = "b.toml"\n')
    (tmp_path / "b.toml").write_text('[target]\nname = "b"\ninherit = "a.toml"\n')
    with pytest.raises(TargetError, match="inheritance cycle"):
        load_target(tmp_path / "a.toml")


def test_builtin_files_are_packaged():
    # The TOML files ship inside the package (package-data), next to the loader.
    import vpuc.targets

    folder = Path(vpuc.targets.__file__).parent
    assert {p.stem for p in folder.glob("*.toml")} == set(builtin_target_names())
