"""The executor: runs a loaded .vpub artifact.

The host graph runs on TVM's Relax VM from the artifact's host library. (VPU subgraphs, once
the partitioner produces them, are packed functions the VM calls into the simulator.)
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

from vpuc.runtime.artifact import Artifact, ArtifactError
from vpuc.runtime.inputs import check_inputs

HOST_LIBRARY = "host.so"


class Executable:
    """A loaded artifact, ready to run; `run(inputs) -> outputs` by graph names."""

    def __init__(self, artifact: Artifact, source: str = "<artifact>") -> None:
        self.artifact = artifact
        self.source = source
        self._workdir = tempfile.TemporaryDirectory(prefix="vpuc-run-")
        library = Path(self._workdir.name) / HOST_LIBRARY
        if HOST_LIBRARY not in artifact.members:
            raise ArtifactError(f"{source}: no host library '{HOST_LIBRARY}' in the artifact")
        library.write_bytes(artifact.members[HOST_LIBRARY])
        try:
            module = tvm.runtime.load_module(str(library))
        except Exception as exc:  # TVM raises its own error types
            raise ArtifactError(f"{source}: host library does not load: {exc}") from None
        self._vm = relax.VirtualMachine(module, tvm.cpu())

    @classmethod
    def load(cls, path: str | Path) -> Executable:
        return cls(Artifact.load(path), source=str(path))

    @property
    def inputs(self) -> list[dict[str, Any]]:
        return self.artifact.inputs

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self.artifact.outputs

    def run(self, inputs: dict[str, np.ndarray], source: str | None = None) -> dict[str, np.ndarray]:
        """Run once; inputs are checked against the manifest (names, shapes, dtypes) and an
        error names `source` (where the inputs came from) or else the artifact."""
        arrays = check_inputs(self.inputs, inputs, source or self.source)
        args = [tvm.runtime.tensor(arrays[spec["name"]]) for spec in self.inputs]
        result = _flatten(self._vm["main"](*args))
        names = [spec["name"] for spec in self.outputs]
        if len(result) != len(names):
            raise ArtifactError(
                f"{self.source}: host graph returned {len(result)} outputs, manifest lists {len(names)}"
            )
        return dict(zip(names, result, strict=True))


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [array for item in value for array in _flatten(item)]
