"""The runtime's user-facing error types, gathered for the CLI (which prints them as one
line and exits 2)."""

from vpuc.runtime.artifact import ArtifactError
from vpuc.runtime.check import CheckError
from vpuc.runtime.inputs import InputError

USER_ERRORS: tuple[type[Exception], ...] = (ArtifactError, CheckError, InputError)
