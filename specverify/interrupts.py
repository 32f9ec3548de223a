"""SIGINT and SIGTERM end a run promptly, wherever they land: `Interrupted` is raised only where it is safe.

`installed()` (the command line's first step) routes both signals here. The handler records the first signal
and raises `Interrupted` at once, unless the process is inside a `deferred()` zone: Hypothesis drawing or
shrinking (an exception in its engine becomes "Inconsistent data generation" and the search goes on) and the
writing of reports (they are written whole, then marked). A search's judge runs in a `raising()` zone inside
it: a signal there (in a kernel call, in a wait on a worker) raises at once. A deferred signal is raised at the
next `checkpoint()`: the start of the next example, the next check, the next target, the end of the zone.

Nor is it raised inside an import that may not be cut (numpy's native part, a module that registers names: cut,
it could not be imported again, and the reports need it), nor while a native module initializes (Triton's
creates enums by calling back into Python: an exception there aborts the process), nor while a thread is
being started (cut there, the new thread may or may not run and cannot be joined), nor in this module's
bookkeeping or code marked `atomic` (a timer being set or cleared), nor inside an import of torch (its native
part calls back into Python while it loads: an exception there once aborted a CI run with SIGABRT; the import
ends within a second or two, then the signal lands). Imports of Triton and our kernels may be cut (nothing after
the signal needs them), except for the torch they import. Nor while an `Interrupted` is on its way up: the main
thread is handling one (an `except`, `finally` or `__exit__` it passes through, a handler's cleanup). Until the
interrupt is `caught()` by the command, a watcher thread signals the main thread again every `AGAIN` seconds: so
a signal that came at such a moment lands as soon as it is past, and one that was swallowed (native code that
drops or keeps any exception, as torch's import of numpy does; an `except BaseException` that goes on) is raised
again. Python also swallows what a garbage-collector callback or a finalizer raises; `installed` sets an
unraisable hook that drops an `Interrupted` silently there.

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
CUT_SHORT = ("triton", "specverify.kernels")   # imports a signal may cut: nothing after it needs them
NATIVE_INIT = ("create_module", "exec_module")   # an ExtensionFileLoader's steps: a native module's init
AGAIN = 0.1          # seconds between the watcher's signals while an interrupt has not landed


class Interrupted(BaseException):
    """SIGTERM or Ctrl-C in the judge: the run stops (its workers ended) with the outcomes that finished
    (BaseException: Hypothesis and the checks let it through, and a call it lands in passes it on: it is
    never the callee's failure)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why
        self.outcomes: list = []


_pending: str | None = None      # the first signal's name, once one came
_number = signal.SIGINT          # and its number
_caught = False                  # the command took the interrupt: nothing more is raised
_zones: list[bool] = []          # innermost last: True where Interrupted may be raised at once
_atomic: set = set()             # code objects the handler never raises in
_over = threading.Event()        # set when the watcher is to end (never touched by the handler: it takes no lock)


def pending() -> str | None:
    """The name of the signal that came ("SIGINT", "SIGTERM"), or None."""
    return _pending


def checkpoint() -> None:
    """Raise the pending interrupt, if a signal came (and this is no deferred zone)."""
    if _pending is not None and not _caught and (not _zones or _zones[-1]):
        raise Interrupted(_pending)


def caught() -> None:
    """The command has taken the interrupt (the first line of its handler), or reads `pending()` itself from
    here on (while it reports): no Interrupted is raised again."""
    global _caught
    _caught = True


def atomic(function):
    """Mark `function` (a timer's setting or clearing) as code the handler never raises in."""
    _atomic.add(function.__code__)
    return function


def _handle(number: int, frame) -> None:
    global _pending, _number
    if _pending is None:
        _pending, _number = signal.Signals(number).name, number
    if frame is not None and (frame.f_code.co_filename == __file__ or frame.f_code in _atomic):
        return                      # bookkeeping: the watcher signals again
    if not _on_its_way() and not _holds(frame):
        checkpoint()


def _on_its_way() -> bool:
    """Whether the main thread is handling an Interrupted (it, or an exception raised while handling it)."""
    exc, seen = sys.exc_info()[1], set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Interrupted):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


def _watch(main: int) -> None:
    """The watcher thread: once a signal came, signal the main thread again every AGAIN seconds until the
    command caught it or the run is over (the handler decides whether to raise)."""
    while not _over.wait(AGAIN):
        if _pending is not None and not _caught:
            try:
                signal.pthread_kill(main, _number)
            except (OSError, ValueError):
                return


def _may_cut(module: str) -> bool:
    return any(module == cut or module.startswith(cut + ".") for cut in CUT_SHORT)


def _holds(frame) -> bool:
    """Whether the code under way keeps a signal from raising: an import that may not be cut, the
    initialization of a native module (an exception raised in the Python it calls back may end the process:
    pybind11 aborts), or `Thread.start` (its wait for the new thread)."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename == threading.__file__ and code.co_name == "start":
            return True
        if code.co_filename == IMPORTING and code.co_name == "_find_and_load":
            if not _may_cut(str(frame.f_locals.get("name", ""))):
                return True
        elif code.co_name in NATIVE_INIT and type(frame.f_locals.get("self")).__name__ == "ExtensionFileLoader":
            return True
        frame = frame.f_back
    return False


def _unraisable(hook):
    def drop_interrupted(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)
    return drop_interrupted


@contextmanager
def installed() -> Iterator[None]:
    """SIGINT and SIGTERM routed to the handler, with its watcher (main thread only; elsewhere nothing
    changes), with no signal pending at the start or afterwards; the previous handlers and unraisable hook
    come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reset()
    previous = {number: signal.signal(number, _handle) for number in SIGNALS}
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(hook)
    watcher = threading.Thread(target=_watch, args=(threading.get_ident(),), name="specverify interrupts",
                               daemon=True)
    watcher.start()
    try:
        yield
    finally:
        _over.set()
        watcher.join()
        for number, handler in previous.items():
            signal.signal(number, handler)
        sys.unraisablehook = hook
        reset()


def reset() -> None:
    """Forget a signal that came (tests, and a new run in the same process)."""
    global _pending, _caught
    _pending, _caught = None, False
    _over.clear()


class _Zone:
    """A zone of `_zones` (the main thread's, where the handler runs: elsewhere a zone changes nothing); its
    entry and exit are bookkeeping the handler never raises in."""

    def __init__(self, may_raise: bool):
        self.may_raise = may_raise
        self.main = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> None:
        if not self.main:
            return
        _zones.append(self.may_raise)
        if self.may_raise:
            try:
                checkpoint()
            except BaseException:
                _zones.pop()
                raise

    def __exit__(self, kind, value, trace) -> None:
        if not self.main:
            return
        _zones.pop()
        if kind is None:
            checkpoint()


def deferred() -> _Zone:
    """A zone where a signal is only recorded (Hypothesis's engine, report writing); a pending one is raised
    at its end, where the zone around it allows."""
    return _Zone(False)


def raising() -> _Zone:
    """A zone inside a deferred one where a signal raises at once (a search's judge); raises a pending one
    on entry."""
    return _Zone(True)
