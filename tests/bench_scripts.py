"""A script of bench/ loaded as a module (bench/ is not a package), for the tests that check one."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def bench_script(name: str):
    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
