"""DESIGN.md's dependency rule, checked on every import statement of the source tree:
targets imports nothing of ours; sim only targets; the compiler targets and the artifact
format (never sim: it has its own cost model); the runtime targets and sim. Only the CLI
joins them all."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALLOWED = {
    "targets": {"vpuc.targets"},
    "sim": {"vpuc.sim", "vpuc.targets"},
    "compiler": {"vpuc.compiler", "vpuc.targets", "vpuc.runtime.artifact", "vpuc.examples"},
    "runtime": {"vpuc.runtime", "vpuc.sim", "vpuc.targets"},
    "examples": {"vpuc.examples"},
}
JOINS = {
    REPO / "compiler" / "cli.py",  # the CLI calls runtime/cli.py for run, sim, asm, disasm
    REPO / "compiler" / "sweep" / "evaluate.py",  # vpuc sweep simulates each point's programs
    # `vpuc run` writes the per-layer CSV in the one format compile writes (compiler/summary.py)
    REPO / "runtime" / "cli.py",
    # `vpuc run --check` builds the QDQ reference the artifact carries unbuilt, with the
    # compiler's host stage, the first time it is asked for (and caches it)
    REPO / "runtime" / "reference.py",
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return [name for name in found if name.startswith("vpuc")]


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_dependency_rule(folder):
    bad = []
    for path in sorted((REPO / folder).rglob("*.py")):
        if path in JOINS:
            continue
        for name in _imports(path):
            if not any(name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED[folder]):
                bad.append(f"{path.relative_to(REPO)} imports {name}")
    assert not bad, "\n".join(bad)


# The stages inside compiler/, in the order a module may import them: a module imports only
# modules of its own stage or an earlier one (DESIGN.md, Layout). The code generator
# (op list, planner, tilers, emitter) comes before the partitioner because the partitioner
# asks it whether a layer fits and what it costs (DESIGN.md contract 6); the Relax reader of
# compiler/lower/ reads partitioned modules, so it comes after the quantiser. The host
# build's kernel lowering and default schedules (host/tasks.py, host/defaults.py with its
# host/padding.py: TVM and compat only) come right after the base: the quantiser builds its
# in-process modules from them too (quantize/calibration/kernels.py). Commands sit on top, each above the ones it
# may call, and the CLI above them all.
STAGES = [
    # split_build: TVM only, compat.build_host calls it; tvm_import: `import tvm` for the CLI
    ("base", ["errors", "compat", "host.split_build", "tvm_import"]),
    ("host kernels", ["host.tasks", "host.defaults", "host.padding"]),
    ("frontend", ["frontend"]),
    ("passes", ["passes", "pipeline"]),
    ("code generator", ["lower.ops", "lower.errors", "lower.codegen"]),
    ("partition", ["partition"]),
    ("quantize", ["quantize"]),
    ("Relax reader", ["lower.reader", "lower"]),
    ("host", ["host"]),
    ("driver", ["driver", "compile_report", "reports", "summary"]),
    ("commands", ["tune", "regress", "sweep"]),
    ("cli", ["cli", "cli_commands", "cli_options"]),
]


def _stage_of(module: str) -> int | None:
    """The stage index of a dotted name under vpuc.compiler (the longest prefix wins)."""
    if not module.startswith("vpuc.compiler."):
        return None
    rest = module.removeprefix("vpuc.compiler.")
    best, length = None, -1
    for index, (_, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            if (rest == prefix or rest.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    return best


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO / "compiler").with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("vpuc", "compiler", *parts))


def test_every_compiler_module_has_a_stage():
    missing = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "compiler").rglob("*.py"))
        if path.name != "__init__.py" or path.parent != REPO / "compiler"
        if _stage_of(_module_name(path)) is None
    ]
    assert not missing, "compiler modules in no stage of STAGES: " + ", ".join(missing)


def _imported_modules(path: Path) -> list[str]:
    """Like _imports, but `from package import module` names the module it takes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                relative = dotted.removeprefix("vpuc.compiler.").replace(".", "/")
                is_module = (REPO / "compiler" / f"{relative}.py").exists() or (
                    REPO / "compiler" / relative / "__init__.py"
                ).exists()
                found.append(dotted if dotted.startswith("vpuc.compiler.") and is_module else node.module)
    return [name for name in found if name.startswith("vpuc")]


def test_stage_order():
    bad = []
    for path in sorted((REPO / "compiler").rglob("*.py")):
        own = _stage_of(_module_name(path))
        if own is None:
            continue
        for name in _imported_modules(path):
            stage = _stage_of(name)
            if stage is not None and stage > own:
                bad.append(
                    f"{path.relative_to(REPO)} ({STAGES[own][0]}) imports {name} ({STAGES[stage][0]}), a later stage"
                )
    assert not bad, "\n".join(bad)


def test_stage_order_sees_a_wrong_import(tmp_path):
    """The check above can fail: an import of a later stage is one it reports."""
    assert _stage_of("vpuc.compiler.quantize.calibration.data") > _stage_of("vpuc.compiler.partition.cost")
    assert _stage_of("vpuc.compiler.lower.reader.extract") > _stage_of("vpuc.compiler.lower.codegen.emit")
    assert _stage_of("vpuc.compiler.cli") > _stage_of("vpuc.compiler.regress.worker")
