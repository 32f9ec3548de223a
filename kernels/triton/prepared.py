"""Prepared calls: a Triton wrapper's launches replayed from a recipe kept per argument signature.

`@prepared` (above a stage's Triton wrapper) keeps, per *signature* of the call's keyword arguments (their
names in order; each tensor's shape, strides, dtype, device and the residue of its address mod 16; each
scalar's type and value, a float's by its bits; the current device), a recipe of what the wrapper
launched: for each launch, the kept CompiledKernel (`launch.py`), the grid, and the launcher's argument
list, in which every tensor is an address: a tensor argument's address plus a fixed byte offset (the
wrapper passed it or a view into it), the address of a workspace kept alive for good (`workspace.held`),
or a scratch tensor the recipe allocates afresh on each call (`scratch`). A later call with the same
signature skips the wrapper: no argument checks (on CUDA outside checked mode they read only the
signature, which passed when the recipe was made), no binding, no specialization, no key: it fills the
addresses into the kept argument lists and calls each launcher on the current stream. Addresses are
passed as ints, which Triton's launcher takes as they are (no `data_ptr` call, no pointer query).

Finding the recipe: each recipe has a guard (`Guard`): the names, the scalars, and the tensors' metadata
tested at once by torch's C++ tensor guard (`torch._C._dynamo.guards.TensorGuards`: type, dispatch keys,
dtype, device, sizes, strides), with the address residues tested as the addresses are filled in. A call
first tries the guards of the HOT recipes it used last, most recent first, and builds its signature only
when none fits (or this torch has no such guard): then the signature finds the recipe in a dict.

What the recipe relies on, all checked when it is made: every launch went through the launcher's kept
CompiledKernels; each of their tensor arguments is one of the three kinds above; the wrapper made no other
torch operation on a device (a dispatch mode watches: views, `empty` and the like only) and returned None;
nothing was capturing a CUDA graph. The launches' integers, constexprs and grids are functions of the
signature (sizes, strides, scalars, the device's properties), since on CUDA outside checked mode a wrapper
never reads a tensor's contents; Triton's specialization of each argument (dtype, 16-byte alignment,
integer properties) is a function of the signature and the offsets too. A recipe is replayed while a CUDA
graph is captured as well (the same launches on the capturing stream, scratch from the graph's pool). A
call is made the plain way (the wrapper runs) when a tensor argument is not on CUDA, in checked mode, with
plain launches, while a launch hook or a kernel's pre-run hook is set, for a signature whose recipe could
not be made, for the first two calls of a signature (the first compiles and allocates what it needs, the
second makes the recipe), while a CUDA graph is being captured before the recipe exists, and inside
another wrapper's recording. SPECVERIFY_PREPARED=0 (read at import) turns recipes off.
"""
from __future__ import annotations

import functools
import operator
import os
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specverify.kernels.validation import SCALAR_TYPES, checked
from specverify.kernels.triton import launch as launching
from specverify.kernels.triton import workspace

try:
    from torch._C._dynamo.guards import TensorGuards
except ImportError:        # a torch without it: recipes are found by their signature alone
    TensorGuards = None

ENABLED = os.environ.get("SPECVERIFY_PREPARED", "1") != "0"
RECIPES_LIMIT = 1024            # signatures kept per wrapper before its recipes start over
HOT = 4                         # recipes whose guards a call tries before it builds its signature
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
_current_device = getattr(torch._C, "_cuda_getDevice", None)
_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_device() -> int:
    """The current CUDA device (torch's own query, without `torch.cuda.current_device`'s lazy-init check
    where torch has it: a recipe exists only once CUDA is initialized)."""
    return _current_device() if _current_device is not None else launching.driver.active.get_current_device()


def current_stream(device: int) -> int:
    """The handle of `device`'s current stream (what Triton's launch is given)."""
    if _current_stream is not None:
        return _current_stream(device)
    return launching.driver.active.get_current_stream(device)


def scratch(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """`torch.empty(shape, dtype=dtype, device=device)` that a recipe allocates afresh on each call. On the CPU
    (Triton's interpreter) and in checked mode it is zeroed and followed by as many zeroed elements: a kernel
    that reads a scratch cell before any program wrote it, or up to its size past its end, then sees a
    plausible value (index 0) the same way on every run, so the checks see that read as a wrong output, not
    as luck."""
    if checked() or torch.device(device).type == "cpu":
        size = int(torch.Size(shape if isinstance(shape, (tuple, list)) else (shape,)).numel())
        made = torch.zeros(2 * size, dtype=dtype, device=device)[:size].view(shape)
    else:
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


def tensors_of(kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The call's tensor arguments, in argument order (what a recipe's argument addresses index)."""
    return [v for v in kwargs.values() if type(v) is torch.Tensor]


def scalar_key(v: Any) -> Any:
    """A scalar as a signature holds it: a float by its bits (0.0 and -0.0 are launched differently)."""
    return v.hex() if type(v) is float else v


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
        """How a launch argument's address is found on a later call: ("arg", position among the tensor
        arguments, offset), ("held", address, tensor), ("scratch", index, offset), or None."""
        ptr = t.data_ptr()
        for position, (_, v) in enumerate(self.tensors):
            if v is t:
                return ("arg", position, 0)
        for i, s in enumerate(self.scratch):
            if s is t or (s.data_ptr() <= ptr < s.data_ptr() + extent(s)):
                return ("scratch", i, ptr - s.data_ptr())
        if workspace.held(t):
            return ("held", ptr, t)
        within = [(position, v) for position, (_, v) in enumerate(self.tensors)
                  if v.data_ptr() == ptr or v.data_ptr() <= ptr < v.data_ptr() + extent(v)]
        if len(within) == 1:
            position, v = within[0]
            return ("arg", position, ptr - v.data_ptr())
        return None

    def recipe(self) -> "Recipe | None":
        if self.refused or not self.launches:
            return None
        steps = []
        for kernel, grid, values, (run, function, packed, compiled) in self.launches:
            template, from_args, from_scratch, keep = [], [], [], []
            for i, v in enumerate(values):
                if isinstance(v, torch.Tensor):
                    found = self.address(v)
                    if found is None:
                        return None
                    if found[0] == "held":
                        keep.append(found[2])
                        template.append(found[1])
                        continue
                    (from_scratch if found[0] == "scratch" else from_args).append((i, found[1], found[2]))
                    template.append(0)
                else:
                    template.append(v)
            grid = tuple(grid) + (1,) * (3 - len(grid))
            steps.append((run, function, packed, grid, template, tuple(from_args), tuple(from_scratch),
                          (keep, compiled), kernel))
        return Recipe(steps, [(tuple(s.shape), s.dtype, s.device) for s in self.scratch],
                      tuple(v.data_ptr() & 15 for _, v in self.tensors))


class Recipe:
    """The launches of one signature's calls (see the module); `residues`: each tensor argument's address
    mod 16 when it was made. `replay` is written for the recipe (`replay_source`): one Python function that
    reads the addresses, tests their residues, allocates the scratch tensors and calls each launcher with
    its arguments spelled out, so a replay builds no argument list."""

    def __init__(self, steps: list[tuple], scratch: list[tuple], residues: tuple[int, ...]):
        self.steps, self.scratch, self.residues = steps, scratch, residues
        self.kernels = tuple(step[-1] for step in steps)
        self.guard: Guard | None = None      # how a call finds it without its signature (`guard`)
        source, names = replay_source(steps, scratch, residues)
        names["empty"] = torch.empty
        kernels = ", ".join(getattr(k, "__name__", "?") for k in self.kernels)
        exec(compile(source, f"<recipe of {kernels}>", "exec"), names)
        self.replay = names["replay"]
        self.replay.__doc__ = "Launch the recipe on the call's tensor arguments (`tensors_of`); False, " \
            "launching nothing, when an address's residue mod 16 is not the recipe's (Triton would " \
            "specialize it differently)."

    def hooked(self) -> bool:
        """Whether a kernel of the recipe has a pre-run hook now (then the wrapper runs)."""
        for kernel in self.kernels:
            if kernel.pre_run_hooks:
                return True
        return False


def replay_source(steps: list[tuple], scratch: list[tuple], residues: tuple[int, ...]) -> tuple[str, dict]:
    """The source of a recipe's `replay(tensors, stream)` and the names it reads (launchers, kernel
    handles, constant arguments, scratch shapes)."""
    names: dict[str, Any] = {}

    def named(value: Any) -> str:
        name = f"k{len(names)}"
        names[name] = value
        return name

    lines = ["def replay(tensors, stream):"]
    lines += [f"    p{i} = tensors[{i}].data_ptr()" for i in range(len(residues))]
    if residues:
        lines.append("    if (" + " | ".join(f"(p{i} - {r})" if r else f"p{i}" for i, r in enumerate(residues))
                     + ") & 15:")
        lines.append("        return False")
    for j, (shape, dtype, device) in enumerate(scratch):
        lines.append(f"    t{j} = empty({named(shape)}, dtype={named(dtype)}, device={named(device)})")
        lines.append(f"    s{j} = t{j}.data_ptr()")    # (t{j} lives until every launch is queued)
    for run, function, packed, grid, template, from_args, from_scratch, _, _ in steps:
        args = [named(v) for v in template]
        for i, position, offset in from_args:
            args[i] = f"p{position} + {offset}" if offset else f"p{position}"
        for i, index, offset in from_scratch:
            args[i] = f"s{index} + {offset}" if offset else f"s{index}"
        lines.append(f"    {named(run)}({grid[0]}, {grid[1]}, {grid[2]}, stream, {named(function)}, {named(packed)}, "
                     f"None, None, None{''.join(', ' + a for a in args)})")
    lines.append("    return True")
    return "\n".join(lines) + "\n", names


def picker(positions: list[int]) -> Callable[[tuple], tuple]:
    """A function taking a tuple to the tuple of its items at `positions` (an itemgetter that always
    gives a tuple)."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        only = positions[0]
        return lambda values: (values[only],)
    return lambda values: ()


class Guard:
    """The quick test that a call's arguments have a recipe's signature but for the address residues
    (which `Recipe.replay` tests): the same names in order, scalars of the same types and values (floats by
    their bits), tensors whose metadata torch's tensor guard accepts, on the same current device."""

    def __init__(self, kwargs: dict[str, Any], device: int, recipe: Recipe):
        values = tuple(kwargs.values())
        self.names, self.device, self.recipe = tuple(kwargs), device, recipe
        self.tensors = picker([i for i, v in enumerate(values) if type(v) is torch.Tensor])
        self.scalars = picker([i for i, v in enumerate(values) if type(v) is not torch.Tensor])
        self.floats = picker([i for i, v in enumerate(values) if type(v) is float])
        self.values = self.scalars(values)
        self.types = tuple(map(type, self.values))
        self.bits = tuple(map(float.hex, self.floats(values)))
        tensors = self.tensors(values)
        self.check = TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                                  dynamic_dims_strides=[list(t.stride()) for t in tensors]).check
        if not self.check(*tensors):
            raise ValueError("the tensor guard refuses the tensors it was made from")

    def fits(self, kwargs: dict[str, Any], values: tuple, device: int) -> tuple | None:
        """The call's tensor arguments when it fits (see the class), else None."""
        if device != self.device or tuple(kwargs) != self.names:
            return None
        scalars = self.scalars(values)
        if scalars != self.values or tuple(map(type, scalars)) != self.types:
            return None
        if self.bits and tuple(map(float.hex, self.floats(values))) != self.bits:
            return None
        tensors = self.tensors(values)
        return tensors if self.check(*tensors) else None


def guard(kwargs: dict[str, Any], device: int, recipe: Recipe) -> Guard | None:
    """The recipe's guard, or None where torch has no tensor guard or it does not take these tensors."""
    if TensorGuards is None:
        return None
    try:
        return Guard(kwargs, device, recipe)
    except Exception:
        return None


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
            parts.append((name, kind, scalar_key(v)))
        else:
            return None
    return tuple(parts)


def hooks_set() -> bool:
    runtime = launching.knobs.runtime
    return (launching.hooked(runtime.launch_enter_hook) or launching.hooked(runtime.launch_exit_hook)
            or getattr(runtime, "add_stages_inspection_hook", None) is not None)


def prepared(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """A stage's Triton wrapper whose calls replay a recipe per signature (see the module)."""
    recipes: dict[tuple, Any] = {}
    hot: list[Guard] = []               # the guards of the recipes used last, most recent first

    def replayed(recipe: Recipe, tensors, device: int) -> bool:
        return not (hooks_set() or recipe.hooked()) and recipe.replay(tensors, current_stream(device))

    @functools.wraps(wrapper)
    def call(**kwargs):
        if not ENABLED or launching.JITFunction is None or launching.plain_now() or checked() \
                or launching.RECORDER.get() is not None:      # (inside another wrapper's recording)
            return wrapper(**kwargs)
        if hot:
            values, device = tuple(kwargs.values()), current_device()
            for entry in hot:
                tensors = entry.fits(kwargs, values, device)
                if tensors is not None:
                    if replayed(entry.recipe, tensors, device):
                        promote(entry)
                        return None
                    break
        key = signature(kwargs)
        if key is None:
            return wrapper(**kwargs)
        device = current_device()
        key = (device, key)
        recipe = recipes.get(key)
        if type(recipe) is Recipe:
            if not replayed(recipe, tensors_of(kwargs), device):
                return wrapper(**kwargs)
            if recipe.guard is not None:
                promote(recipe.guard)
            return None
        if recipe is UNPREPARED or hooks_set():
            return wrapper(**kwargs)
        if recipe is None or torch.cuda.is_current_stream_capturing():
            if len(recipes) >= RECIPES_LIMIT:
                forget()
            recipes.setdefault(key, SEEN)   # the first call compiles and allocates: the next one records
            return wrapper(**kwargs)
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
        if made is not None:
            made.guard = guard(kwargs, device, made)
        return returned

    def promote(entry: Guard) -> None:
        """Put `entry` first among the hot guards (keeping HOT of them)."""
        if hot and hot[0] is entry:
            return
        try:
            hot.remove(entry)
        except ValueError:          # not hot (or another thread moved it)
            pass
        hot.insert(0, entry)
        del hot[HOT:]

    def forget() -> None:
        """Drop every recipe (the next calls of each signature make them again)."""
        recipes.clear()
        hot.clear()

    call.recipes, call.forget = recipes, forget
    return call
