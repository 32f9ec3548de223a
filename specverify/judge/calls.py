"""Calling an implementation on a planned arena: here (in this process) or in an isolated worker.

Both callers return a `Result`: the arena after the call, the non-tensor arguments after the call, the
returned value, and what went wrong (an exception, an exit, a signal, a time-out). Nothing is judged here.
Before the first call on a CUDA device, a caller runs its backend's warm-up there once per process
(`warm_backend`; `Backend.warm_up`).
"""
from __future__ import annotations

import signal
import threading
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from specverify import interrupts
from specverify.interrupts import Interrupted
from specverify.judge.device import context_lost, probe_context
from specverify.judge.materialize import Bound, Plan

SUITE_ERRORS = frozenset({"no-room"})    # CallError kinds that are the suite's limit, not the callee's doing
TEXT = 300                               # characters of a CallError's one line
CONTEXT_LOST = "(the CUDA context of its process is lost with it: the next call runs in a fresh worker process)"


@dataclass
class CallError:
    """What went wrong in a call, in words the judge can use without trusting the callee."""
    kind: str                    # "raised", "exit", "signal", "timeout", "lost" (the worker broke protocol),
                                 # "missing" (an import path that names nothing), "load" (it did not load),
                                 # "no-room" (the suite found no device memory for a wide argument: not called)
    text: str                    # one line
    types: tuple[str, ...] = ()  # "raised": the exception's class and its bases, by name
    trace: str = ""              # the last frames, or the worker's last output lines
    context_lost: bool = False   # the call took its process's CUDA context with it (`device.probe_context`)

    def headline(self) -> str:
        return f"raised {self.text}" if self.kind == "raised" else self.text


@dataclass
class Result:
    arena: np.ndarray | None     # None when the callee died
    values: dict[str, Any]       # non-tensor arguments after the call
    returned: Any
    error: CallError | None
    measures: dict[str, Any] = field(default_factory=dict)   # what a probe measured (numbers, names)


class RunSetupError(BaseException):
    """The judge could not set up a worker process (start it, contain it, limit it, seal it) before any
    outside code ran in it: an error of the run (`specverify.cli`: one line, exit status 3), never a failure
    of the implementation (BaseException: Hypothesis and the checks let it through)."""


class CallTimeout(BaseException):
    """Raised inside an in-process call that ran past its time limit (BaseException: `except Exception`
    in the callee does not swallow it)."""


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:TEXT]


class time_limit:
    """Interrupt Python code in this (main) thread after `seconds` (CallTimeout); a no-op elsewhere or without
    a limit. Its timer is set and cleared where an interrupt never lands (`interrupts.atomic`)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.previous = None

    @interrupts.atomic
    def __enter__(self) -> None:
        if self.seconds and threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM"):
            self.previous = signal.signal(signal.SIGALRM, expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    @interrupts.atomic
    def __exit__(self, kind, value, trace) -> None:
        if self.previous is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
            self.previous = None


def expire(signum, frame):
    raise CallTimeout()


@contextmanager
def on_device(device: str) -> Iterator[None]:
    """Make `device` ("cuda:1") the current CUDA device for the call (Triton launches on the current
    one); plain "cuda" and "cpu" leave it as it is."""
    if not device.startswith("cuda:"):
        yield
        return
    import torch

    with torch.cuda.device(device):
        yield


_warmed: set[tuple[str, int]] = set()     # (warm-up, CUDA device index) already run in this process


def warm_backend(warm_up: str, device: str) -> None:
    """Run a backend's warm-up ("module:function", `Backend.warm_up`) on the current CUDA device, once per
    (warm-up, device) in this process, and wait for it; nothing for "" or off CUDA."""
    if not warm_up or not device.startswith("cuda"):
        return
    import torch

    from specverify.judge.device import synchronize
    from specverify.records.backends import load

    index = torch.cuda.current_device()
    if (warm_up, index) not in _warmed:
        load(warm_up)(torch.device("cuda", index))
        synchronize(device)
        _warmed.add((warm_up, index))


def invoke(impl: Callable[..., Any], plan: Plan, arena: np.ndarray, lib: str, device: str, checked: bool,
           timeout: float | None, probe: str = "plain", warm_up: str = "") -> tuple[Any, CallError | None, Bound, dict]:
    """Call `impl` on the plan's arguments over `arena`, the way `probe` (specverify.judge.probes, through the
    table `specverify.judge.probes.seal` took) says, after the backend's `warm_up` (`warm_backend`); afterwards
    the arena holds what it did. Returns (returned value, error, bound arguments, measures)."""
    from specverify.judge.probes import resolve_probe
    from specverify.kernels.validation import checked_mode

    bound = Bound(plan, arena, lib, device)
    returned, error, measures = None, None, {}
    if bound.no_room:           # the suite could not lay out a wide argument: nothing is called
        return returned, CallError("no-room", bound.no_room), bound, measures
    try:
        with checked_mode(checked), time_limit(timeout), on_device(device):
            warm_backend(warm_up, device)
            returned, measures = resolve_probe(probe)(lambda: impl(**bound.kwargs), bound, device)
    except CallTimeout:
        error = CallError("timeout", f"timed out: still running after {timeout:g} s")
    except (KeyboardInterrupt, Interrupted):
        raise
    except SystemExit as exc:
        error = CallError("exit", f"called sys.exit({exc.code!r}) (exit inside the call)")
    except BaseException as exc:  # anything the callee raises is its failure, reported by name
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
        error = CallError("raised", error_text(exc), tuple(c.__name__ for c in type(exc).__mro__),
                          "".join(frames[-6:]))
    try:
        bound.read_back()
    except Exception as exc:  # a kernel that broke the device context: the bytes are lost
        error = error or CallError("raised", f"the device failed after the call: {error_text(exc)}")
    if error is not None and error.kind not in SUITE_ERRORS and device.startswith("cuda"):
        if probe_context(device) is not None:
            error.context_lost = True
            error.text = f"{error.text[:TEXT - len(CONTEXT_LOST) - 1]} {CONTEXT_LOST}"
    return returned, error, bound, measures


class InProcess:
    """Calls an implementation in this process (our own kernels, the oracle, tests). Once this process's
    CUDA context is lost (a call here took it: `device.context_lost`), a CUDA call goes to `spare(device)`,
    a worker caller of the same implementation started for it, so every later call still gets a live
    context; without a spare it runs here, and fails as the lost context makes it."""

    isolated = False

    def __init__(self, impl: Callable[..., Any], lib: str, device: str, timeout: float | None = None,
                 warm_up: str = "", spare: Callable[[str], Any] | None = None):
        self.impl, self.lib, self.device, self.timeout, self.warm_up = impl, lib, device, timeout, warm_up
        self.spare, self.moved = spare, None

    def call(self, plan: Plan, arena: np.ndarray, checked: bool = False, probe: str = "plain") -> Result:
        if self.moved is None and self.spare is not None and self.device.startswith("cuda") and context_lost():
            self.moved = self.spare(self.device)
        if self.moved is not None:
            return self.moved.call(plan, arena, checked, probe)
        returned, error, bound, measures = invoke(self.impl, plan, arena, self.lib, self.device, checked,
                                                  self.timeout, probe, self.warm_up)
        return Result(arena, bound.values_after(), returned, error, measures)

    def close(self) -> None:
        if self.moved is not None:
            self.moved.close()
            self.moved = None
