"""The backend environment, prepared once before any kernel module is imported.

The Triton interpreter is chosen when a Triton kernel is *defined* (at import of its module, and for
Triton's own `tl.sum` and kin at import of `triton`), so `prepare()` must run before either: it turns the
interpreter on when no CUDA device is present. Torch may import Triton on its own (under a
TorchDispatchMode, say): the pytest plugin prepares at configure time.
"""
from __future__ import annotations

import collections
import functools
import os
import sys
import types
from functools import lru_cache


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@lru_cache(maxsize=1)
def prepare() -> None:
    """Turn the Triton interpreter on where no CUDA device is present (idempotent)."""
    if "TRITON_INTERPRET" not in os.environ and not cuda_available():
        os.environ["TRITON_INTERPRET"] = "1"


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


LIBRARIES = {"triton", "torch", "numpy"} | set(getattr(sys, "stdlib_module_names", ()))
MOST_VISITED = 20_000      # objects `reaches_triton` looks at, at most


def contents(cell):
    try:
        return cell.cell_contents
    except ValueError:      # an empty cell
        return None


def reaches_triton(impl) -> bool:
    """Whether an implementation reaches a Triton kernel (a `triton.runtime.jit.KernelInterface`: a
    JITFunction, an Autotuner, Heuristics): among the globals of its module, in the modules, functions,
    closures, containers, classes and objects (their attributes) those name, transitively, outside Triton,
    Torch, NumPy and the standard library.
    Only Triton kernels the implementation can name count (a kernel it reaches through an object built
    at call time does not)."""
    if "triton" not in sys.modules:
        return False
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:
        return False
    try:
        return walks_to(impl, KernelInterface)
    except Exception:   # an object that will not be looked at (a property that raises): no kernel found
        return False


def walks_to(impl, kind: type) -> bool:
    """Whether an object of `kind` is reachable from `impl` the way `reaches_triton` says (breadth first:
    the nearest names are looked at first)."""
    seen: set[int] = set()
    todo = collections.deque([impl])
    while todo and len(seen) < MOST_VISITED:
        item = todo.popleft()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, kind):
            return True
        if isinstance(item, types.ModuleType):
            if item.__name__.partition(".")[0] not in LIBRARIES:
                todo += list(vars(item).values())
            continue
        if isinstance(item, functools.partial):
            todo.append(item.func)
            continue
        if isinstance(item, (types.FunctionType, types.MethodType, type)):
            todo.append(sys.modules.get(getattr(item, "__module__", None) or ""))
            todo += [contents(cell) for cell in getattr(item, "__closure__", None) or ()]
            todo.append(getattr(item, "__wrapped__", None))
            todo.append(getattr(item, "__func__", None))
        elif isinstance(item, dict):
            todo += list(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo += list(item)
        elif type(item).__module__.partition(".")[0] not in LIBRARIES:
            todo.append(type(item))      # an object of the implementation's own (a kernel wrapper): its class,
            todo += list(getattr(item, "__dict__", {}).values())      # and what it holds
    return False


@lru_cache(maxsize=1)
def triton_import_error() -> str | None:
    """None when Triton imports, else why it does not."""
    prepare()
    try:
        import triton  # noqa: F401
    except Exception as exc:  # any failure to import means: not available, and why
        return f"triton does not import: {type(exc).__name__}: {exc}"
    return None


def versions() -> dict[str, str]:
    """The suite's, Python's and its libraries' versions, read from the installed packages' metadata (nothing
    is imported: an interrupted run reports them at once)."""
    import platform
    from importlib import metadata

    import specverify

    found = {"specverify": specverify.__version__, "python": platform.python_version()}
    for name in ("numpy", "torch", "triton"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found
