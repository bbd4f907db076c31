"""The runtime's error types, gathered for the CLI: user errors print as one line and exit
2; a VPU program that faults (a vpuc bug, or an artifact edited with its checksums
recomputed) prints as one line naming the subgraph, layer and instruction, and exits 3."""

from vpuc.runtime.artifact import ArtifactError
from vpuc.runtime.check import CheckError
from vpuc.runtime.inputs import InputError


class VpuRunError(RuntimeError):
    """A VPU call that cannot run: the message names the subgraph, the layer and the pc."""


USER_ERRORS: tuple[type[Exception], ...] = (ArtifactError, CheckError, InputError)
