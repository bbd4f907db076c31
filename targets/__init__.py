"""Target descriptions as data: TOML files loaded into frozen dataclasses.

Bottom of the dependency graph: `vpuc.targets` imports nothing else of vpuc. The compiler,
the simulator and the runtime all receive a `Target` explicitly; there is no global target.
"""

from vpuc.targets.loader import builtin_target_names, load_target, resolve_target
from vpuc.targets.model import Hardware, HostOptions, Numerics, Target, TargetError

__all__ = [
    "Hardware",
    "HostOptions",
    "Numerics",
    "Target",
    "TargetError",
    "builtin_target_names",
    "load_target",
    "resolve_target",
]
