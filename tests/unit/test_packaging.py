"""Every package folder of the source tree is listed in pyproject.toml, so a non-editable
install never lacks a module."""

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_is_listed():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {package: Path(folder) for package, folder in config["package-dir"].items()}
    found = set()
    for package, folder in roots.items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            found.add(".".join([package, *relative.parts]))
    assert found == listed, f"unlisted: {sorted(found - listed)}, stale: {sorted(listed - found)}"
