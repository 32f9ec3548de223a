"""The installed packages as pyproject.toml maps them onto this checkout (specverify.kernels is kernels/,
its subpackages below it): for tests that read every module's source."""
from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def folders(root: Path = ROOT) -> dict[str, Path]:
    """Package name -> folder, as pyproject.toml maps them (specverify.kernels is kernels/, ...)."""
    setup = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {name: root / path for name, path in setup.get("package-dir", {}).items()}

    def folder(name: str) -> Path:
        head, _, tail = name.rpartition(".")
        return mapped.get(name) or (folder(head) / tail if head else root / name)

    return {name: folder(name) for name in setup["packages"]}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the installed packages: dotted name -> file."""
    found = {}
    for package, folder in folders(root).items():
        for path in folder.glob("*.py"):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found
