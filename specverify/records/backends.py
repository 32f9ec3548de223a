"""Backends and targets: which implementation of a stage runs where on this machine, and why not.

A backend is a small record; a target is one implementation of one stage on one device. A backend may
name a warm-up ("module:function" taking a `torch.device`) that makes what its kernels cache per device;
the caller runs it once per device before the first call on CUDA (`specverify.judge.calls.warm_backend`), so no
measured call builds a cached constant, whatever ran before it in the process.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from specverify import env
from specverify.records import dialects
from specverify.records.stage import Stage

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Backend:
    name: str
    lib: str                      # how tensors are handed over: "numpy" arrays or "torch" tensors
    devices: tuple[str, ...]      # where it can run at all
    validates: bool               # refuses invalid input (the invalid tier applies)
    slow_on_cpu: bool = False     # interpreted on the CPU: draws small shapes there
    trusted: bool = True          # our own code (outside implementations always run isolated)
    warm_up: str = ""             # "module:function"(torch.device): makes its per-device cached constants
    reference: bool = False       # the oracle: what the others are judged against (never against itself, not
                                  # benched, run in the caller's process)
    marker: str = ""              # the pytest marker of its tests, where it is not its name

    @property
    def host_only(self) -> bool:
        """Runs on the CPU only (host code): the device properties do not apply to it."""
        return self.devices == ("cpu",)

    @property
    def pytest_marker(self) -> str:
        return self.marker or self.name


BACKENDS = {
    "oracle": Backend("oracle", "numpy", ("cpu",), validates=True, reference=True),
    "numpy": Backend("numpy", "numpy", ("cpu",), validates=True),
    "torch": Backend("torch", "torch", DEVICES, validates=True, warm_up="specverify.kernels.torch.layout:warm_up"),
    "triton": Backend("triton", "torch", DEVICES, validates=True, slow_on_cpu=True),
    "impl": Backend("impl", "torch", DEVICES, validates=False, trusted=False, marker="vendor"),
}
BUILT_IN = tuple(name for name, backend in BACKENDS.items() if backend.trusted)   # ours, in the order listed


def outside(name: object) -> bool:
    """Whether `name` (as a report or case file records it, whatever its type) is the backend of outside
    implementations; False for a name this version does not know."""
    return any(backend.name == name and not backend.trusted for backend in BACKENDS.values())


@dataclass(frozen=True)
class Target:
    """One implementation of one stage on one device."""
    stage: Stage
    backend: Backend
    device: str
    source: str                                   # "module:function" it is loaded from
    impl: Callable[..., Any] | None = field(default=None, compare=False)  # given directly (tests)
    dialect: str = ""                             # the rule dialect it is judged by ("": the record's rule)
    domain: object = field(default=None, compare=False)   # its declared domain (specverify.records.domain.Domain)
    # why an outside implementation's kernels run in Triton's interpreter ("" where they do not): it is
    # drawn the interpreter's small shapes, as our Triton backend on the CPU is (`slow`)
    interpreted: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        return f"{self.stage.name} on {self.backend.name}/{self.device}"

    @property
    def slow(self) -> bool:
        return self.backend.slow_on_cpu and self.device == "cpu" or bool(self.interpreted)

    def load(self) -> Callable[..., Any]:
        return self.impl if self.impl is not None else load(self.source)


def unavailable(backend: str, device: str) -> str | None:
    """None when `backend` runs on `device` here, else the reason it does not."""
    env.prepare()
    if device not in DEVICES:
        return f"unknown device {device!r}"
    if device not in BACKENDS[backend].devices:
        return "host code: runs on the CPU only"
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


class NotLoadable(ValueError):
    """An import path that names no callable (a usage error, not a failure of the implementation)."""


def load(path: str) -> Callable[..., Any]:
    """Import "package.module:function" (after the backend environment is prepared). Modules in the
    current directory are found too, after installed ones."""
    env.prepare()
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise NotLoadable(f"implementation {path!r}: expected 'package.module:function'")
    module = importlib.import_module(module_name)
    try:
        func = getattr(module, attr)
    except AttributeError:
        raise NotLoadable(f"implementation {path!r}: module {module_name} has no attribute {attr!r}") from None
    if not callable(func):
        raise NotLoadable(f"implementation {path!r} is not callable")
    return func


def stage_backends(stage: Stage) -> list[str]:
    """Our backends of a record (a record judged by a dialect: the implementations that dialect names;
    its oracle is not checked against itself)."""
    return ([] if stage.dialect else ["oracle"]) + [b for b in BUILT_IN if b in stage.impls]


def target(stage: Stage, backend: str, device: str, impl_path: str | None = None, dialect: str = "") -> Target:
    """The implementation to check, judged by `dialect` ("" keeps `stage.dialect`: the record's rule, or
    the dialect a record from `dialects.judged` has); raises LookupError when the stage has none for
    `backend`, dialects.UnknownDialect for a dialect the record does not have."""
    stage = dialects.judged(stage, dialect) if dialect else stage
    dialect = stage.dialect
    if backend == "impl":
        if not impl_path:
            raise LookupError("backend 'impl' needs an import path")
        return Target(stage, BACKENDS["impl"], device, impl_path, dialect=dialect)
    if backend == "oracle":
        return Target(stage, BACKENDS["oracle"], device, f"{stage.oracle.__module__}:{stage.oracle.__qualname__}",
                      stage.oracle, dialect=dialect)
    if backend not in stage.impls:
        under = f" under dialect {dialect!r}" if dialect else ""
        raise LookupError(f"{stage.name} has no {backend} implementation{under}")
    return Target(stage, BACKENDS[backend], device, stage.impls[backend], dialect=dialect)


def matrix(stages: list[Stage], backends: list[str] | None = None, devices: list[str] | None = None,
           only_dialect: str | None = None) -> list[tuple[Stage, str, str, str | None]]:
    """Every (stage, backend, device) asked for, with None where it runs here or the reason it does not.
    A stage with dialects that have implementations of ours also comes judged by each (the record from
    `dialects.judged`); `only_dialect` keeps the records of that one ("" : the record's own rule)."""
    rows = []
    for stage in stages:
        for view in dialects.views(stage):
            if only_dialect is not None and view.dialect != only_dialect:
                continue
            for backend in stage_backends(view):
                if backends and backend not in backends:
                    continue
                for device in devices or DEVICES:
                    if device not in BACKENDS[backend].devices:
                        continue
                    rows.append((view, backend, device, unavailable(backend, device)))
    return rows
