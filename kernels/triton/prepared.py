"""Prepared calls: a Triton wrapper's launches replayed from a recipe kept per argument signature.

`@prepared` (above a stage's Triton wrapper) keeps, per *signature* of the call's keyword arguments (each
tensor's shape, strides, dtype, device and the residue of its address mod 16; each scalar's type and
value; the current device), a recipe of what the wrapper launched: for each launch, the kept
CompiledKernel (`launch.py`), the grid, and the launcher's argument list, in which every tensor is an
address: a keyword argument's address plus a fixed byte offset (the wrapper passed it or a view into it),
the address of a workspace kept alive for good (`workspace.held`), or a scratch tensor the recipe
allocates afresh on each call (`scratch`). A later call with the same signature skips the wrapper: no
argument checks (on CUDA outside checked mode they read only the signature, which passed when the recipe
was made), no binding, no specialization, no key: it fills the addresses into the kept argument lists and
calls each launcher on the current stream. Addresses are passed as ints, which Triton's launcher takes as
they are (no `data_ptr` call, no pointer query).

What the recipe relies on, all checked when it is made: every launch went through the launcher's kept
CompiledKernels; each of their tensor arguments is one of the three kinds above; the wrapper made no other
torch operation on a device (a dispatch mode watches: views, `empty` and the like only) and returned None;
nothing was capturing a CUDA graph. The launches' integers, constexprs and grids are functions of the
signature (sizes, strides, scalars, the device's properties), since on CUDA outside checked mode a wrapper
never reads a tensor's contents; Triton's specialization of each argument (dtype, 16-byte alignment,
integer properties) is a function of the signature and the offsets too. A call is made the plain way (the
wrapper runs) when a tensor argument is not on CUDA, in checked mode, with plain launches, while a launch
hook or a kernel's pre-run hook is set, for a signature whose recipe could not be made, for the first
two calls of a signature (the first compiles and allocates what it needs, the second makes the recipe),
while a CUDA graph is being captured before the recipe exists, and inside another wrapper's recording.
SPECVERIFY_PREPARED=0 (read at import) turns recipes off.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specverify.kernels.checks import SCALAR_TYPES, checked
from specverify.kernels.triton import launch as launching
from specverify.kernels.triton import workspace

ENABLED = os.environ.get("SPECVERIFY_PREPARED", "1") != "0"
RECIPES_LIMIT = 1024            # signatures kept per wrapper before its recipes start over
UNPREPARED = object()           # a signature whose calls go through the wrapper
SEEN = object()                 # a signature called once: its next call makes the recipe
# aten ops that only make or reshape tensor metadata (or allocate): they launch nothing on a device, so
# they are allowed while a recipe is made (and tests/dispatch_count.py does not count them as launches)
METADATA_OPS = frozenset((
    "view", "_unsafe_view", "reshape", "expand", "as_strided", "slice", "select", "unsqueeze", "squeeze",
    "permute", "t", "transpose", "alias", "detach", "lift_fresh", "empty", "empty_like", "new_empty",
    "empty_strided", "unbind", "split", "split_with_sizes", "chunk", "narrow", "diagonal", "unfold",
    "view_as_real", "view_as_complex", "_reshape_alias",
))


def scratch(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """`torch.empty(shape, dtype=dtype, device=device)` that a recipe allocates afresh on each call."""
    made = torch.empty(shape, dtype=dtype, device=device)
    recording = launching.RECORDER.get()
    if recording is not None:
        recording.scratch.append(made)
    return made


def extent(t: torch.Tensor) -> int:
    """Bytes from a tensor's address to the end of its last element (0 when it has none)."""
    if t.numel() == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()


class Recording:
    """What one wrapper call launched, while it is made into a recipe."""

    def __init__(self, kwargs: dict[str, Any]):
        self.tensors = [(name, v) for name, v in kwargs.items() if type(v) is torch.Tensor]
        self.scratch: list[torch.Tensor] = []
        self.launches: list[tuple] = []
        self.refused = False

    def launched(self, kernel, grid: tuple, values: list | None, kept: tuple | None) -> None:
        """Called by `launch.launch` for every launch of the call (kept: its kept CompiledKernel, or None
        when it went the plain way)."""
        if kept is None or values is None or kernel.pre_run_hooks:
            self.refused = True
            return
        self.launches.append((kernel, grid, values, kept))

    def address(self, t: torch.Tensor) -> tuple | None:
        """How a launch argument's address is found on a later call: ("arg", name, offset), ("held", address,
        tensor), ("scratch", index, offset), or None."""
        ptr = t.data_ptr()
        for name, v in self.tensors:
            if v is t:
                return ("arg", name, 0)
        for i, s in enumerate(self.scratch):
            if s is t or (s.data_ptr() <= ptr < s.data_ptr() + extent(s)):
                return ("scratch", i, ptr - s.data_ptr())
        if workspace.held(t):
            return ("held", ptr, t)
        within = [(name, v) for name, v in self.tensors
                  if v.data_ptr() == ptr or v.data_ptr() <= ptr < v.data_ptr() + extent(v)]
        if len(within) == 1:
            name, v = within[0]
            return ("arg", name, ptr - v.data_ptr())
        return None

    def recipe(self) -> "Recipe | None":
        if self.refused or not self.launches:
            return None
        steps = []
        for kernel, grid, values, (run, function, packed, compiled) in self.launches:
            template, slots, keep = [], [], []
            for i, v in enumerate(values):
                if isinstance(v, torch.Tensor):
                    found = self.address(v)
                    if found is None:
                        return None
                    if found[0] == "held":
                        keep.append(found[2])
                        template.append(found[1])
                        continue
                    slots.append((i, found[0] == "scratch", found[1], found[2]))
                    template.append(0)
                else:
                    template.append(v)
            grid = tuple(grid) + (1,) * (3 - len(grid))
            steps.append((run, function, packed, grid, template, tuple(slots), (keep, compiled), kernel))
        return Recipe(steps, [(tuple(s.shape), s.dtype, s.device) for s in self.scratch])


class Recipe:
    """The launches of one signature's calls (see the module)."""

    def __init__(self, steps: list[tuple], scratch: list[tuple]):
        self.steps, self.scratch = steps, scratch

    def hooked(self) -> bool:
        """Whether a kernel of the recipe has a pre-run hook now (then the wrapper runs)."""
        return any(step[-1].pre_run_hooks for step in self.steps)

    def replay(self, kwargs: dict[str, Any], stream: int) -> None:
        temps = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype, device in self.scratch]
        for run, function, packed, grid, template, slots, _, kernel in self.steps:
            args = list(template)
            for i, is_scratch, source, offset in slots:
                args[i] = (temps[source] if is_scratch else kwargs[source]).data_ptr() + offset
            run(grid[0], grid[1], grid[2], stream, function, packed, None, None, None, *args)


class DeviceWork(TorchDispatchMode):
    """Notes whether any aten op other than METADATA_OPS runs inside."""

    def __init__(self):
        super().__init__()
        self.seen = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in METADATA_OPS:
            self.seen = True
        return func(*args, **(kwargs or {}))


def signature(kwargs: dict[str, Any]) -> tuple | None:
    """The recipe key of a call (see the module), or None when it cannot have a recipe (a tensor off
    CUDA, an argument of another type)."""
    parts = []
    for name, v in kwargs.items():
        kind = type(v)
        if kind is torch.Tensor:
            if not v.is_cuda:
                return None
            parts.append((name, v.shape, v.stride(), v.dtype, v.device, v.data_ptr() & 15))
        elif kind in SCALAR_TYPES:
            parts.append((name, kind, v))
        else:
            return None
    return tuple(parts)


def hooks_set() -> bool:
    knobs = launching.knobs
    return (launching.hooked(knobs.runtime.launch_enter_hook) or launching.hooked(knobs.runtime.launch_exit_hook)
            or getattr(knobs.runtime, "add_stages_inspection_hook", None) is not None)


def prepared(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """A stage's Triton wrapper whose calls replay a recipe per signature (see the module)."""
    recipes: dict[tuple, Any] = {}

    @functools.wraps(wrapper)
    def call(**kwargs):
        if not ENABLED or launching.JITFunction is None or launching.plain_now() or checked() \
                or launching.RECORDER.get() is not None:      # (inside another wrapper's recording)
            return wrapper(**kwargs)
        key = signature(kwargs)
        if key is None:
            return wrapper(**kwargs)
        device = launching.driver.active.get_current_device()
        key = (device, key)
        recipe = recipes.get(key)
        if recipe is UNPREPARED or hooks_set():
            return wrapper(**kwargs)
        if recipe is None or torch.cuda.is_current_stream_capturing():
            if len(recipes) >= RECIPES_LIMIT:
                recipes.clear()
            recipes.setdefault(key, SEEN)   # the first call compiles and allocates: the next one records
            return wrapper(**kwargs)
        if recipe is not SEEN:
            if recipe.hooked():
                return wrapper(**kwargs)
            recipe.replay(kwargs, launching.driver.active.get_current_stream(device))
            return None
        recording = Recording(kwargs)
        watch = DeviceWork()
        token = launching.RECORDER.set(recording)
        try:
            with watch:
                returned = wrapper(**kwargs)
        finally:
            launching.RECORDER.reset(token)
        made = None if returned is not None or watch.seen else recording.recipe()
        recipes[key] = UNPREPARED if made is None else made
        return returned

    call.recipes = recipes
    return call
