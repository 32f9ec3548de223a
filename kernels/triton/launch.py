"""A leaner launch of a Triton kernel that runs the very kernel `kernel[grid](...)` would run.

`launch(kernel, grid, *args, **meta)` does what `kernel[grid](*args, **meta)` does; a kernel decorated
`@launcher` (above `@triton.jit`) launches this way when called as `kernel[grid](...)`. The first call for a
specialization goes through `kernel[grid]` (Triton binds, compiles or finds the kernel, launches) and
the returned CompiledKernel is kept; later calls with the same key call its launcher directly
(`CompiledKernel.run`, the C function `JITFunction.run` ends in, with the same arguments), skipping
the option parsing, the string cache key, the globals check, and the launch metadata and hook calls
while no launch hook is installed (an empty hook chain is passed as None, which the launcher skips).

The key is Triton's own: the specialization list of the kernel's binder (dtype of each tensor, 16-byte
alignment of pointers, int == 1 and divisible by 16, i32/i64/u64 by range, None, constexpr values) plus
the device, the run options `JITFunction.run` adds (the debug and instrumentation knobs) and any extra
keyword options. When a specialization is first kept, Triton's own cache key for the same arguments must
select the kernel it returned; if it does not (a Triton whose `run` differs), the kernel goes back to
`kernel[grid]` for good. Plain `kernel[grid]` is also used in the Triton interpreter, for Triton
versions without `compute_cache_key`, while a pre-run hook or a stage-inspection hook is set, inside
`plain_launch()`, with SPECVERIFY_PLAIN_LAUNCH=1 (read at import), and when building the key raises; in
the interpreter the launch's device calls patch the language once (`interpreted.once`).
Not re-checked on the fast path: Triton's guard that module globals used by the kernel keep the values
they had when it was compiled (the kernels here read only constants).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any, Iterator

from specverify.kernels.triton import interpreted

try:                                  # the pieces of Triton's runtime the fast path relies on
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction, compute_cache_key
except ImportError:                   # an older Triton: plain launches only
    JITFunction = None

_plain = os.environ.get("SPECVERIFY_PLAIN_LAUNCH") == "1"
_kernels: dict[Any, "Kernel | None"] = {}     # JITFunction -> its fast-path state (None: plain launches)
_UNSET = object()
# the recording of a wrapper call being made into a recipe (`prepared.py`): told of every launch
RECORDER: ContextVar[Any] = ContextVar("specverify_launch_recorder", default=None)


def plain_now() -> bool:
    """Whether launches go through `kernel[grid]` now (SPECVERIFY_PLAIN_LAUNCH, `plain_launch`)."""
    return _plain


@contextmanager
def plain_launch(on: bool = True) -> Iterator[None]:
    """Launch through `kernel[grid]` inside the block (for comparisons)."""
    global _plain
    before, _plain = _plain, on
    try:
        yield
    finally:
        _plain = before


class Kernel:
    """The fast-path state of one JITFunction: its binders by device and the kept launches by key."""

    def __init__(self, fn):
        self.fn = fn
        self.binders: dict[int, Any] = {}
        self.launches: dict[tuple, tuple] = {}
        self.device = driver.active.get_current_device
        self.stream = driver.active.get_current_stream
        self.instrumentation = hasattr(knobs.compilation, "instrumentation_mode")

    def binder(self, device: int):
        binder = self.binders.get(device)
        if binder is None:
            binder = self.binders[device] = self.fn.device_caches[device][-1]
        return binder

    def options(self) -> tuple:
        """The run options JITFunction.run adds to the caller's (its debug and instrumentation knobs)."""
        mode = knobs.compilation.instrumentation_mode if self.instrumentation else None
        return knobs.runtime.debug, mode

    def triton_key(self, device: int, *args, **meta):
        """The key JITFunction.run files the compilation for these arguments under (Triton >= 3.5)."""
        caches = self.fn.device_caches[device]
        kwargs = dict(meta)
        kwargs["debug"] = kwargs.get("debug", self.fn.debug) or knobs.runtime.debug
        if self.instrumentation:
            kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        _, specialization, options = caches[-1](*args, **kwargs)
        return caches[0], compute_cache_key(caches[1], specialization, options)

    def keep(self, key: tuple, compiled, device: int, *args, **meta) -> None:
        """Keep `compiled` for `key` if it is a CompiledKernel that Triton's own key for these arguments
        selects; otherwise this kernel launches plainly from now on."""
        try:
            kernel_cache, triton_key = self.triton_key(device, *args, **meta)
            usable = (compiled is not None and not hasattr(compiled, "result")      # not a compile future
                      and kernel_cache.get(triton_key) is compiled)
            if usable:
                self.launches[key] = (compiled.run, compiled.function, compiled.packed_metadata, compiled)
                return
        except Exception:
            pass
        _kernels[self.fn] = None


def launch_key(binder, context: tuple, *args, **meta) -> tuple[tuple, Any]:
    """(the launch key, the bound argument values) of a call through a JITFunction's `binder`: the key
    is `context` (device, run options), Triton's specialization of each parameter and any extra options."""
    bound, specialization, options = binder(*args, **meta)
    return (context, tuple(specialization), tuple(options.items()) if options else ()), bound.values()


class Launcher:
    """A JITFunction whose `[grid](*args, **meta)` launches through `launch` (use as `@launcher`
    above `@triton.jit`); every other attribute is the JITFunction's."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid: tuple[int, ...]):
        return partial(launch, self.fn, grid)

    def __getattr__(self, name: str):
        return getattr(self.fn, name)


def launcher(fn) -> Launcher:
    return Launcher(fn)


def state(kernel) -> Kernel | None:
    """The fast-path state of `kernel`, or None when it launches plainly."""
    found = _kernels.get(kernel, _UNSET)
    if found is not _UNSET:
        return found
    usable = (JITFunction is not None and isinstance(kernel, JITFunction) and hasattr(kernel, "device_caches")
              and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"))
    try:
        found = Kernel(kernel) if usable else None
    except Exception:
        found = None
    _kernels[kernel] = found
    return found


def launch(kernel, grid: tuple[int, ...], *args, **meta) -> None:
    """`kernel[grid](*args, **meta)`, through the kept CompiledKernel when there is one (see the module)."""
    fast = None if _plain else state(kernel)
    recorder = RECORDER.get()
    if fast is None or kernel.pre_run_hooks or getattr(knobs.runtime, "add_stages_inspection_hook", None):
        if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
            kernel[grid](*args, **meta)
        else:
            with interpreted.once(kernel):
                kernel[grid](*args, **meta)
        if recorder is not None:
            recorder.launched(kernel, grid, None, None)
        return
    try:
        device = fast.device()
        key, bound = launch_key(fast.binder(device), (device, fast.options()), *args, **meta)
        kept = fast.launches.get(key)
    except Exception:
        kernel[grid](*args, **meta)
        if recorder is not None:
            recorder.launched(kernel, grid, None, None)
        return
    if recorder is not None:
        recorder.launched(kernel, grid, list(bound), kept)
    if kept is None:
        compiled = kernel[grid](*args, **meta)
        fast.keep(key, compiled, device, *args, **meta)
        return
    run, function, packed, compiled = kept
    stream = fast.stream(device)
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    if hooked(enter) or hooked(leave):
        metadata = compiled.launch_metadata(grid, stream, *bound)
    else:                                 # nothing to call: the launcher skips None hooks and metadata
        metadata = enter = leave = None
    run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream, function, packed,
        metadata, enter, leave, *bound)


def hooked(hook) -> bool:
    """Whether a launch hook would call anything: not None, and not an empty HookChain (Triton's
    default in recent versions, where it is never None)."""
    return hook is not None and bool(getattr(hook, "calls", True))


def cdiv(x: int, y: int) -> int:
    """`triton.cdiv` on Python ints, without its call overhead (a jit function in recent Triton)."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """`triton.next_power_of_2` on Python ints (0 for n <= 0), without its call overhead."""
    return 1 << (n - 1).bit_length() if n > 0 else 0
