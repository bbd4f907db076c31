"""The .vpub artifact: a zip of manifest.json plus named members (host library, VPU
programs and weights, report.json).

The manifest records the format version, the target, the inputs and outputs (name, shape,
dtype), the sha256 of every member and its own (`manifest_sha256`, over the rest of it);
`Artifact.load` refuses a file whose checksums or version do not match, so an edited
manifest never reaches the executor (runtime/manifest.py checks the structure of one that
was rewritten with its checksums). `save` writes to a temporary file and renames it, so a
failed save never leaves a half-written artifact behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "vpub"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest_sha256"  # of the manifest without this key: a hand edit shows


class ArtifactError(ValueError):
    """An artifact that cannot be written or read; the message names the file."""


BOUND_INPUTS = "bound_inputs.npz"  # --bind-input values, for the reference model of --check


def bound_inputs_npz(arrays: dict[str, Any]) -> bytes:
    """The member that keeps the values of the inputs --bind-input made constants."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@dataclass
class Artifact:
    """An in-memory artifact: the manifest (without checksums) and the member files."""

    manifest: dict[str, Any]
    members: dict[str, bytes] = field(default_factory=dict)

    @property
    def inputs(self) -> list[dict[str, Any]]:
        return self.manifest["inputs"]

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self.manifest["outputs"]

    @property
    def bound_inputs(self) -> dict[str, Any]:
        """The inputs --bind-input made constants, by name, with their values (numpy)."""
        import numpy as np

        entry = self.manifest.get("bound_inputs")
        if not entry or entry.get("member") not in self.members:
            return {}
        with np.load(io.BytesIO(self.members[entry["member"]]), allow_pickle=False) as data:
            return {name: data[name] for name in data.files}

    @property
    def report(self) -> dict[str, Any]:
        raw = self.members.get("report.json")
        return json.loads(raw) if raw else {}

    def save(self, path: str | Path) -> Path:
        """Write the zip atomically; returns the path written."""
        path = Path(path)
        manifest = {
            **self.manifest,
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "members": {name: _sha256(data) for name, data in sorted(self.members.items())},
        }
        manifest[MANIFEST_DIGEST] = _manifest_digest(manifest)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        except OSError as exc:
            raise ArtifactError(f"{path}: cannot write: {exc.strerror}") from None
        try:
            follow_umask(fd)
            with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
                zf.writestr(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
                for name, data in sorted(self.members.items()):
                    zf.writestr(name, data)
            os.replace(tmp, path)
        except BaseException as exc:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise ArtifactError(f"{path}: cannot write: {exc.strerror}") from None
            raise
        return path

    @classmethod
    def load(cls, path: str | Path) -> Artifact:
        """Read and verify an artifact: format, version and every member's checksum."""
        path = Path(path)
        if not path.is_file():
            raise ArtifactError(f"{path}: no such artifact")
        try:
            with zipfile.ZipFile(path) as zf:
                names = set(zf.namelist())
                if MANIFEST not in names:
                    raise ArtifactError(f"{path}: not a .vpub artifact (no {MANIFEST})")
                manifest = json.loads(zf.read(MANIFEST))
                _check_format(path, manifest)
                _check_manifest_digest(path, manifest)
                members = {name: zf.read(name) for name in manifest["members"] if name in names}
        except zipfile.BadZipFile:
            hint = f"; compile it first: vpuc compile {path}" if path.suffix.lower() == ".onnx" else ""
            raise ArtifactError(f"{path}: not a .vpub artifact (not a zip file){hint}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ArtifactError(f"{path}: {MANIFEST} is not valid JSON: {exc}") from None
        _check_members(path, manifest, members)
        dropped = ("members", "format", "format_version", MANIFEST_DIGEST)
        manifest = {k: v for k, v in manifest.items() if k not in dropped}
        return cls(manifest=manifest, members=members)


def _check_format(path: Path, manifest: dict[str, Any]) -> None:
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{path}: {MANIFEST} is not a JSON object")
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path}: not a .vpub artifact (format {manifest.get('format')!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ArtifactError(
            f"{path}: format version {version!r} is not supported (this vpuc reads {FORMAT_VERSION})"
        )
    for key in ("members", "inputs", "outputs", "target"):
        if key not in manifest:
            raise ArtifactError(f"{path}: {MANIFEST} lacks '{key}'")


def _check_manifest_digest(path: Path, manifest: dict[str, Any]) -> None:
    """vpuc writes the manifest's own sha256 into it; an edited manifest (shapes, dtypes,
    names) would disagree with the host library it describes, so it is refused here."""
    if manifest.get(MANIFEST_DIGEST) != _manifest_digest(manifest):
        raise ArtifactError(
            f"{path}: {MANIFEST} was edited after vpuc wrote it (its {MANIFEST_DIGEST} does not "
            "match); compile the model again"
        )


def _manifest_digest(manifest: dict[str, Any]) -> str:
    content = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    return _sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode())


def _check_members(path: Path, manifest: dict[str, Any], members: dict[str, bytes]) -> None:
    for name, digest in manifest["members"].items():
        if name not in members:
            raise ArtifactError(f"{path}: member '{name}' listed in {MANIFEST} is missing")
        if _sha256(members[name]) != digest:
            raise ArtifactError(f"{path}: member '{name}' fails its sha256 check (corrupt or edited)")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def follow_umask(fd: int) -> None:
    """Give a mkstemp file (created 0600) the mode any file the user writes gets: 0666 less the
    umask, so artifacts and models can be shared as the user's umask allows."""
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
