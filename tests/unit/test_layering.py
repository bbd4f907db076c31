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
JOINS = {REPO / "compiler" / "cli.py"}  # the CLI calls runtime/cli.py for run, sim, asm, disasm


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
