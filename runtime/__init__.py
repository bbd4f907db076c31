"""vpuc's runtime: the .vpub artifact, the heterogeneous executor (TVM VM + VPU simulator),
and the reports.

Public API:
    load(path) -> Executable;  Executable.run(inputs) -> outputs
    Artifact (the .vpub format; written by the compiler, read here)

`load` is imported lazily: the compiler imports `vpuc.runtime.artifact` to write artifacts
and must not pull in the simulator (DESIGN.md's dependency rule).
"""

from vpuc.runtime.artifact import FORMAT_VERSION, Artifact, ArtifactError


def load(path):
    """Load a .vpub artifact for execution (see vpuc.runtime.executor.Executable)."""
    from vpuc.runtime.executor import Executable

    return Executable.load(path)


__all__ = ["FORMAT_VERSION", "Artifact", "ArtifactError", "load"]
