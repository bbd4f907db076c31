"""The .vpub container: round trip, checksums, format version, atomic writes."""

import json
import zipfile

import pytest

from vpuc.runtime.artifact import FORMAT_VERSION, Artifact, ArtifactError


def _artifact() -> Artifact:
    manifest = {"target": {"name": "cpu"}, "inputs": [], "outputs": [], "vpu_programs": []}
    return Artifact(manifest=manifest, members={"host.so": b"\x7fELF...", "report.json": b"{}"})


def test_round_trip(tmp_path):
    path = _artifact().save(tmp_path / "a.vpub")
    loaded = Artifact.load(path)
    assert loaded.members == _artifact().members
    assert loaded.manifest == _artifact().manifest
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    assert manifest["format_version"] == FORMAT_VERSION
    assert set(manifest["members"]) == {"host.so", "report.json"}
    assert all(len(digest) == 64 for digest in manifest["members"].values())


def _rewrite(path, name, data):
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members[name] = data
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in members.items():
            zf.writestr(n, d)


def test_checksum_mismatch_is_refused(tmp_path):
    path = _artifact().save(tmp_path / "a.vpub")
    _rewrite(path, "host.so", b"\x7fELF tampered")
    with pytest.raises(ArtifactError, match=r"a\.vpub: member 'host\.so' fails its sha256 check"):
        Artifact.load(path)


def test_unknown_format_version_is_refused(tmp_path):
    path = _artifact().save(tmp_path / "a.vpub")
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    manifest["format_version"] = FORMAT_VERSION + 1
    _rewrite(path, "manifest.json", json.dumps(manifest).encode())
    with pytest.raises(ArtifactError, match=rf"format version {FORMAT_VERSION + 1} is not supported"):
        Artifact.load(path)


def test_not_an_artifact(tmp_path):
    path = tmp_path / "x.vpub"
    path.write_bytes(b"not a zip")
    with pytest.raises(ArtifactError, match="not a zip file"):
        Artifact.load(path)
    with pytest.raises(ArtifactError, match="no such artifact"):
        Artifact.load(tmp_path / "missing.vpub")


def test_failed_save_leaves_nothing(tmp_path):
    target = tmp_path / "out.vpub"
    target.mkdir()  # os.replace onto a directory fails after the zip is written
    with pytest.raises((ArtifactError, OSError)):
        _artifact().save(target)
    assert [p.name for p in tmp_path.iterdir()] == ["out.vpub"]
    assert list(target.iterdir()) == []
