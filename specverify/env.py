"""The backend environment, prepared once before any kernel module is imported.

The Triton interpreter is chosen when a Triton kernel is *defined* (at import of its module, and for
Triton's own `tl.sum` and kin at import of `triton`), so `prepare()` must run before either: it turns the
interpreter on when no CUDA device is present. Torch may import Triton on its own (under a
TorchDispatchMode, say): the pytest plugin prepares at configure time.
"""
from __future__ import annotations

import os
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
