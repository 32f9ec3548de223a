"""Backends and devices: which implementation of a stage runs where on this machine, and why not.

`oracle` (NumPy, the reference), `numpy` (host stages' production version), `torch` (CPU; CUDA when
present), `triton` (CUDA when present, else the Triton interpreter on CPU tensors), and `impl`: an
outside implementation named by import path.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable

from specverify import env
from specverify.harness import Target
from specverify.stage import Stage

BACKENDS = ("oracle", "numpy", "torch", "triton")
DEVICES = ("cpu", "cuda")


def unavailable(backend: str, device: str) -> str | None:
    """None when `backend` runs on `device` here, else the reason it does not."""
    env.prepare()
    if device not in DEVICES:
        return f"unknown device {device!r}"
    if backend in ("oracle", "numpy"):
        return None if device == "cpu" else "host code: runs on the CPU only"
    if device == "cuda" and not env.cuda_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    if backend == "triton":
        problem = env.triton_import_error()
        if problem:
            return problem
        if device == "cpu" and not env.triton_interpreted():
            return "CUDA is present, so Triton compiles for the GPU (TRITON_INTERPRET is off)"
        if device == "cuda" and env.triton_interpreted():
            return "TRITON_INTERPRET=1 is set: Triton runs in its CPU interpreter"
    return None


def load(path: str) -> Callable[..., Any]:
    """Import "package.module:function" (after the backend environment is prepared). Modules in the
    current directory are found too, after installed ones, as under `python -m`."""
    env.prepare()
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"implementation {path!r}: expected 'package.module:function'")
    module = importlib.import_module(module_name)
    try:
        func = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"implementation {path!r}: module {module_name} has no attribute {attr!r}") from None
    if not callable(func):
        raise ValueError(f"implementation {path!r} is not callable")
    return func


def stage_backends(stage: Stage) -> list[str]:
    return ["oracle"] + [b for b in BACKENDS if b in stage.impls]


def target(stage: Stage, backend: str, device: str, impl_path: str | None = None) -> Target:
    """The implementation to check; raises LookupError when the stage has none for `backend`."""
    if backend == "impl":
        if not impl_path:
            raise LookupError("backend 'impl' needs an import path")
        return Target(stage, "impl", device, load(impl_path), impl_path)
    if backend == "oracle":
        source = f"{stage.oracle.__module__}:{stage.oracle.__qualname__}"
        return Target(stage, "oracle", device, stage.oracle, source)
    if backend not in stage.impls:
        raise LookupError(f"{stage.name} has no {backend} implementation")
    return Target(stage, backend, device, load(stage.impls[backend]), stage.impls[backend])


def matrix(stages: list[Stage], backends: list[str] | None = None,
           devices: list[str] | None = None) -> list[tuple[Stage, str, str, str | None]]:
    """Every (stage, backend, device) asked for, with None where it runs here or the reason it does not."""
    rows = []
    for stage in stages:
        for backend in stage_backends(stage):
            if backends and backend not in backends:
                continue
            for device in devices or DEVICES:
                if backend in ("oracle", "numpy") and device != "cpu":
                    continue  # host code: the CPU is its only device
                rows.append((stage, backend, device, unavailable(backend, device)))
    return rows
