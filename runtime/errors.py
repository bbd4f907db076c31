"""The runtime's error types, gathered for the CLI: user errors print as one line and exit
2; a VPU program that faults (a vpuc bug, or an artifact edited with its checksums
recomputed) prints as one line naming the subgraph, layer and instruction, and exits 3.

Defined here, not beside the code that raises them (runtime/check.py, runtime/inputs.py
import them from here): the CLI imports this module for every command, and those modules
import numpy and onnx (0.15-0.19 s, a third of `vpuc targets`).
"""

from vpuc.runtime.artifact import ArtifactError


class CheckError(ValueError):
    """The reference model cannot be run on these inputs."""


class InputError(ValueError):
    """Inputs that do not fit the model; the message names the file and the tensor."""


class VpuRunError(RuntimeError):
    """A VPU call that cannot run: the message names the subgraph, the layer and the pc."""


USER_ERRORS: tuple[type[Exception], ...] = (ArtifactError, CheckError, InputError)
