"""The [host] section: a full TVM CPU target, defaulting to the compiling machine; the
artifact records it, and a CPU that lacks its instruction-set extensions is refused."""

from __future__ import annotations

import json

import pytest

from vpuc.compiler import compat, compile_model
from vpuc.compiler.host.target import resolve_host_target
from vpuc.examples import zoo
from vpuc.runtime.artifact import ArtifactError
from vpuc.runtime.host_check import check_host_target, this_machine
from vpuc.targets import TargetError, load_target


def _target(tmp_path, host_lines: str):
    path = tmp_path / "mine.toml"
    path.write_text(f'[target]\nname = "mine"\nkind = "cpu"\n[host]\n{host_lines}\n')
    return load_target(path)


def test_default_host_target_is_this_machine(tmp_path):
    host = resolve_host_target(load_target("cpu"))
    triple, cpu, features = this_machine()
    assert host.fields["mcpu"] == cpu == compat.llvm_host_cpu_name()
    assert host.fields["num-cores"] >= 1
    assert set(host.detected) == {"mtriple", "mcpu", "num-cores"}
    assert set(host.isa_features) <= features  # the code it builds runs here


def test_host_target_fields_from_toml(tmp_path):
    target = _target(tmp_path, 'mcpu = "x86-64"\nmattr = ["+avx2", "+fma"]\nnum-cores = 3')
    host = resolve_host_target(target)
    assert host.fields["mcpu"] == "x86-64" and host.fields["mattr"] == ["+avx2", "+fma"]
    assert host.num_cores == 3 and host.detected == ("mtriple",)
    assert {"avx2", "fma", "sse2"} <= set(host.isa_features) and "avx512f" not in host.isa_features


@pytest.mark.parametrize(
    "lines,message",
    [
        ('mattr = "+avx2"', r"host\.mattr: must be a list"),
        ('mattr = ["avx2"]', r"host\.mattr: must be a list"),
        ("num-cores = 0", r"host\.num-cores: 0 is out of range"),
        ('kind = "cuda"', r"host\.kind: 'cuda' is not one of llvm"),
        ('llvm = "llvm -mcpu=znver3"', r"host\.llvm: TVM 0\.27 takes no options"),
        ("mcpu = 3", r"host\.mcpu: must be a string"),
    ],
)
def test_bad_host_section(tmp_path, lines, message):
    with pytest.raises(TargetError, match=message):
        _target(tmp_path, lines)


def test_unknown_cpu_is_refused_at_build(tmp_path):
    with pytest.raises(TargetError, match=r"host\.mcpu: 'znver99' is not a CPU LLVM knows"):
        resolve_host_target(_target(tmp_path, 'mcpu = "znver99"'))


def test_manifest_records_the_host_target():
    artifact = compile_model(zoo.build("tinyconvnet"), target="cpu")
    recorded = artifact.manifest["host_target"]
    assert recorded["target"]["mcpu"] == compat.llvm_host_cpu_name()
    assert "sse2" in recorded["isa_features"]
    assert artifact.report["host_build"]["target"] == recorded["target"]


def _manifest(mcpu="skylake-avx512", triple="x86_64-pc-linux-gnu", features=("avx2", "avx512f", "sse2")):
    return {
        "host_target": {
            "target": {"kind": "llvm", "mtriple": triple, "mcpu": mcpu},
            "isa_features": list(features),
        }
    }


def test_cpu_lacking_an_extension_is_refused():
    machine = ("x86_64-unknown-linux-gnu", "znver3", {"sse2", "avx2", "fma"})
    with pytest.raises(
        ArtifactError, match=r"m\.vpub: built for skylake-avx512 .*this CPU \(znver3\) lacks avx512f"
    ):
        check_host_target(_manifest(), "m.vpub", machine)
    check_host_target(_manifest(features=("avx2", "sse2")), "m.vpub", machine)  # runs
    check_host_target({}, "m.vpub", machine)  # artifacts from before host_target: not checked


def test_other_architecture_is_refused():
    machine = ("x86_64-unknown-linux-gnu", "znver3", {"sse2"})
    with pytest.raises(ArtifactError, match=r"built for cortex-a72 .*this machine is x86_64"):
        check_host_target(_manifest("cortex-a72", "aarch64-linux-gnu", ("neon",)), "m.vpub", machine)


def test_run_refuses_an_artifact_for_a_bigger_cpu(vpuc, tmp_path):
    """Built here for a CPU with AVX-512 (LLVM cross-compiles), then the manifest is made
    to need an extension no CPU has: `vpuc run` exits 2 with one line, nothing executed."""
    artifact = compile_model(zoo.build("tinyconvnet"), target="cpu")
    artifact.manifest["host_target"]["isa_features"].append("avx512-future-ext")
    path = artifact.save(tmp_path / "m.vpub")
    result = vpuc("run", path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "lacks avx512-future-ext" in lines[0] and str(path) in lines[0]


def test_cross_compiled_artifact_builds(tmp_path):
    """An artifact for another x86 CPU compiles here and says what it needs."""
    target = _target(tmp_path, 'mcpu = "skylake-avx512"\nnum-cores = 4')
    artifact = compile_model(zoo.build("tinyconvnet"), target=target)
    recorded = artifact.manifest["host_target"]
    assert recorded["target"]["mcpu"] == "skylake-avx512" and "avx512f" in recorded["isa_features"]
    assert json.dumps(recorded)  # plain JSON
