"""SIGINT and SIGTERM end a run promptly, wherever they land: `Interrupted` is raised only where it is safe.

`installed()` (the command line's first step) routes both signals here. The handler records the first signal
and raises `Interrupted` at once, unless the process is inside a `deferred()` zone: Hypothesis drawing or
shrinking (an exception in its engine becomes "Inconsistent data generation" and the search goes on) and the
writing of reports (they are written whole, then marked). A search's judge runs in a `raising()` zone inside
it: a signal there (in a kernel call, in a wait on a worker) raises at once. A deferred signal is raised at the
next `checkpoint()`: the start of the next example, the next check, the next target. A signal during an import
is raised when the outermost import returns: raised inside it, it would leave the module (numpy's native part,
a module that registers names) impossible to import again, and the reports need them. Only imports of torch,
Triton and our kernels are cut at once (the longest; nothing after the signal needs them). Python swallows what a
garbage-collector callback or a finalizer raises; `installed` sets an unraisable hook that drops an
`Interrupted` silently there, and the signal stays pending for the next checkpoint.

Nothing heavy is imported here: `installed` runs before the rest of the suite is imported, so a signal during
the imports is one line too.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
IMPORTING = "<frozen importlib._bootstrap>"   # the code of an import under way
CUT_SHORT = ("torch", "triton", "specverify.kernels")   # imports a signal may cut: nothing after it needs them


class Interrupted(BaseException):
    """SIGTERM or Ctrl-C in the judge: the run stops (its workers ended) with the outcomes that finished
    (BaseException: Hypothesis and the checks let it through, and a call it lands in passes it on: it is
    never the callee's failure)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why
        self.outcomes: list = []


_pending: str | None = None      # the first signal's name, once one came
_zones: list[bool] = []          # innermost last: True where Interrupted may be raised at once


def pending() -> str | None:
    """The name of the signal that came ("SIGINT", "SIGTERM"), or None."""
    return _pending


def checkpoint() -> None:
    """Raise the pending interrupt, if a signal came (and this is no deferred zone)."""
    if _pending is not None and (not _zones or _zones[-1]):
        raise Interrupted(_pending)


def _handle(number: int, frame) -> None:
    global _pending
    if _pending is None:
        _pending = signal.Signals(number).name
    imports = _imports(frame)
    if imports and not all(_may_cut(name) for name, _ in imports):
        _raise_on_return(imports[-1][1])
    else:
        checkpoint()


def _may_cut(module: str) -> bool:
    return any(module == cut or module.startswith(cut + ".") for cut in CUT_SHORT)


def _imports(frame) -> list[tuple[str, object]]:
    """(module name, frame) of every import under way, innermost first."""
    found = []
    while frame is not None:
        if frame.f_code.co_filename == IMPORTING and frame.f_code.co_name == "_find_and_load":
            found.append((str(frame.f_locals.get("name", "")), frame))
        frame = frame.f_back
    return found


def _raise_on_return(importing) -> None:
    """Raise the pending interrupt (where the zone allows) as soon as the import `importing` is done."""
    def watch(frame, event, arg) -> None:
        if frame is importing and event == "return":
            sys.setprofile(None)
            checkpoint()
    sys.setprofile(watch)


def _unraisable(hook):
    def drop_interrupted(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)
    return drop_interrupted


@contextmanager
def installed() -> Iterator[None]:
    """SIGINT and SIGTERM routed to the handler (main thread only; elsewhere nothing changes), with no signal
    pending at the start or afterwards; the previous handlers and unraisable hook come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reset()
    previous = {number: signal.signal(number, _handle) for number in SIGNALS}
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(hook)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.unraisablehook = hook
        reset()


def reset() -> None:
    """Forget a signal that came (tests, and a new run in the same process)."""
    global _pending
    _pending = None


@contextmanager
def _zone(may_raise: bool) -> Iterator[None]:
    _zones.append(may_raise)
    try:
        if may_raise:
            checkpoint()
        yield
    finally:
        _zones.pop()


def deferred():
    """A zone where a signal is only recorded (Hypothesis's engine, report writing)."""
    return _zone(False)


def raising():
    """A zone inside a deferred one where a signal raises at once (a search's judge); raises a pending one
    on entry."""
    return _zone(True)
