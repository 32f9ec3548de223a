"""Records wired from one naming scheme.

Stage `family.name` lives in the module of its family, `family`, the same in every place:

| piece | where |
| --- | --- |
| oracle | `specverify.oracles.<family>:<name>` |
| kernels | `specverify.kernels.<backend>.<family>:<name>`, backends torch and triton (numpy for a host stage) |
| strategies | `specverify.strategies.<family>`: `<name>_valid`, `_hazard`, `_invalid`, `_invariants`, `_table` (rows) |
| worked example | `specverify.stages.<family>:<name>_worked`, beside the record |

`wired` builds the record from them. A field given to it overrides its piece (None: the stage has none), and a
piece the scheme names that does not exist is a `WiringError` naming the stage and the piece, raised when the
record's module is imported. `sources_exist` checks a record's `module:function` sources without importing them.
The other way round, `unused_pieces` finds a function named like a piece (`*_valid`, `_hazard`, `_invalid`,
`_invariants`, `_table`, `_worked`) in a module records take pieces from that no record or dialect uses: a stage
renamed or dropped with its pieces left behind (helpers are named otherwise).
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import re
import sys
from functools import lru_cache
from typing import Any

from specverify.records.stage import Stage

DEVICE_BACKENDS = ("torch", "triton")
HOST_BACKENDS = ("numpy",)
STRATEGY_PIECES = {"valid": "valid", "hazard": "hazard", "invalid": "invalid", "invariants": "invariants",
                   "rows": "table"}   # record field -> suffix of its strategy
PIECE_NAME = re.compile(r"_(valid|hazard|invalid|invariants|table|worked)$")
PIECE_PACKAGES = ("specverify.strategies.", "specverify.stages.")


class WiringError(LookupError):
    """A record's piece that its naming scheme names is missing."""


def kernels(module: str, function: str, backends: tuple[str, ...] = DEVICE_BACKENDS) -> dict[str, str]:
    """`Stage.impls`: `function` in `module` of each backend's kernels."""
    return {backend: f"specverify.kernels.{backend}.{module}:{function}" for backend in backends}


def wired(name: str, **fields: Any) -> Stage:
    """The record of stage `name` ("family.stage") with every piece the scheme names found in the family's
    modules and the rest of its fields as given; a given field overrides its piece."""
    module, stage = name.split(".", 1)
    where = f"stage {name} (module {module})"
    found: dict[str, Any] = {}
    if "oracle" not in fields:
        found["oracle"] = _attribute(f"specverify.oracles.{module}", stage, where, "oracle")
    strategies = f"specverify.strategies.{module}"
    for record_field, suffix in STRATEGY_PIECES.items():
        if record_field not in fields:
            found[record_field] = _attribute(strategies, f"{stage}_{suffix}", where, f"{suffix} strategy")
    if "worked" not in fields:
        found["worked"] = _attribute(f"specverify.stages.{module}", f"{stage}_worked", where, "worked example")
    if "impls" not in fields:
        found["impls"] = kernels(module, stage, HOST_BACKENDS if fields.get("host") else DEVICE_BACKENDS)
    record = Stage(name=name, **found, **fields)
    missing = [f"{backend} kernel {source}" for backend, source in record.impls.items() if not sources_exist(source)]
    if missing:
        raise WiringError(f"{where}: no {missing[0]}")
    return record


def _attribute(module_name: str, attribute: str, where: str, piece: str) -> Any:
    # the record's own module is still being imported: what it defined above the record is there already
    module = sys.modules.get(module_name) or _import(module_name, where, piece)
    if not hasattr(module, attribute):
        raise WiringError(f"{where}: no {piece} {module_name}:{attribute}")
    return getattr(module, attribute)


def _import(module_name: str, where: str, piece: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise WiringError(f"{where}: no {piece} module {module_name}") from e


def sources_exist(source: str) -> bool:
    """Whether "module:function" names a top-level function or assignment of an existing module; read from its
    source (a kernel module imports torch or triton), or from the module where it is loaded already."""
    module_name, _, attribute = source.partition(":")
    if module_name in sys.modules:
        return hasattr(sys.modules[module_name], attribute)
    return attribute in _top_level_names(module_name)


@lru_cache(maxsize=None)
def _top_level_names(module_name: str) -> frozenset[str]:
    try:
        spec = importlib.util.find_spec(module_name)
    except ModuleNotFoundError:
        return frozenset()
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return frozenset()
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return frozenset(names)


def unused_pieces(stages) -> list[str]:
    """"module:function" of each function named like a piece, in a module of `PIECE_PACKAGES` that the records
    `stages` take pieces from, that none of them (nor their dialects) uses."""
    used: set[tuple[str, str]] = set()

    def walk(value: Any) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for item in dataclasses.fields(value):
                walk(getattr(value, item.name))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif callable(value) and hasattr(value, "__name__"):
            used.add((getattr(value, "__module__", ""), value.__name__))

    walk(list(stages))
    modules = sorted({module for module, _ in used if module.startswith(PIECE_PACKAGES)})
    return [f"{module}:{name}" for module in modules for name, value in vars(sys.modules[module]).items()
            if PIECE_NAME.search(name) and callable(value) and getattr(value, "__module__", "") == module
            and (module, name) not in used]
