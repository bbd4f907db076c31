"""The QDQ reference of an artifact's VPU subgraphs, built when `vpuc run --check` first
needs it (issue 23: a default compile builds only the host code that runs).

The artifact carries the reference module serialised (member `reference.json`, manifest
`reference.module` and its `sha256`); the first check builds it for this machine's host
with the compiler's host build and caches the library beside the artifact as
`<artifact>.reference-<sha12>.so` (in the run's temporary directory when that folder is
not writable). A later check loads the cached library. Artifacts compiled with
`--reference` have the reference in their host library and need none of this.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import tvm
from tvm import relax

from vpuc.runtime.artifact import ArtifactError, follow_umask


def reference_vm(executable, workdir: str) -> relax.VirtualMachine:
    """A VM holding the reference's functions (REFERENCE_ENTRY, REFERENCE_PREFIX<i>)."""
    spec = executable.artifact.manifest["reference"]
    member = spec["module"]
    text = executable.artifact.members.get(member)
    if text is None:
        raise ArtifactError(f"{executable.source}: the manifest names '{member}', the artifact lacks it")
    digest = hashlib.sha256(text).hexdigest()
    if digest != spec.get("sha256"):
        raise ArtifactError(f"{executable.source}: '{member}' does not match its sha256 in the manifest")
    cached = _cache_path(executable.source, digest, workdir)
    if not cached.is_file():
        _build(text.decode(), executable, cached)
    try:
        return relax.VirtualMachine(tvm.runtime.load_module(str(cached)), tvm.cpu())
    except Exception as exc:  # TVM raises its own error types
        raise ArtifactError(f"{cached}: the cached QDQ reference does not load: {exc}") from None


def _cache_path(source: str, digest: str, workdir: str) -> Path:
    artifact = Path(source)
    folder = artifact.parent if artifact.is_file() and os.access(artifact.parent, os.W_OK) else Path(workdir)
    return folder / f"{artifact.name}.reference-{digest[:12]}.so"


def _build(text: str, executable, path: Path) -> None:
    from vpuc.compiler.host.build import build_host_library

    mod = tvm.ir.load_json(text)
    library = build_host_library(mod, executable.target, f"{executable.source} (QDQ reference)").library
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".so", delete=False) as partial:
        partial.write(library)
        follow_umask(partial.fileno())  # beside the artifact, shared like it (issue 26 item 7)
    os.replace(partial.name, path)  # never a half-written cache
