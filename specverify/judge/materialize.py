"""Handing an example to an implementation, and reading back what it did.

Every tensor argument is one *slot* of a byte arena: a front guard, the base allocation (the strided
layout's storage, gaps included), a back guard. The view handed over starts at a non-zero offset inside it,
so a write one element past either end lands in a guard. Inputs' guards and gaps hold a guard pattern,
outputs are poisoned everywhere. After the call the whole arena is read back and judged byte for byte by
the caller (`harness`), never by the process that ran the implementation.

A slot with `wide` strides (Torch tensors; the judge lays them out with `wide_strides`, so that the view's
last step along one axis lies past 2**31 elements) is handed over from a storage of its own on the slot's
device: its values are copied in before the call and back into the arena's slot after it (`specverify.runs.
wide_offsets`); the storage's gaps hold the guard pattern and are not read back.

The arena is plain bytes and a `Plan` is plain data, so an isolated worker needs nothing else.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from specverify.records.stage import Example, Layout, Stage
from specverify.records.values import ALIGN, GUARD, GUARD_BYTES, POISON_A, np_dtype


def contiguous_layout(ndim: int) -> Layout:
    return Layout((1,) * ndim, (0,) * ndim)


@dataclass(frozen=True)
class Slot:
    """Where one tensor argument lives in the arena."""
    name: str
    role: str                  # "input", "output" or "inout" (an input the stage updates in place)
    dtype: str
    shape: tuple[int, ...]     # of the view handed over
    layout: Layout
    offset: int                # byte offset of the front guard in the arena
    wide: tuple[int, ...] | None = None   # strides of a view handed over from a storage of its own (wide_strides)

    @cached_property
    def itemsize(self) -> int:
        return np_dtype(self.dtype).itemsize

    @cached_property
    def base_shape(self) -> tuple[int, ...]:
        return self.layout.base_shape(self.shape)

    @cached_property
    def base_bytes(self) -> int:
        return int(np.prod(self.base_shape, dtype=np.int64)) * self.itemsize

    @cached_property
    def end(self) -> int:
        return self.offset + 2 * GUARD_BYTES + self.base_bytes

    def split(self, arena: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(front guard bytes, base as the slot's dtype, back guard bytes) of an arena."""
        start = self.offset + GUARD_BYTES
        base = arena[start:start + self.base_bytes].view(np_dtype(self.dtype)).reshape(self.base_shape)
        return arena[self.offset:start], base, arena[start + self.base_bytes:self.end]

    def view_of(self, base):
        return self.layout.to_view(base[self.layout.view_index(self.shape)])


@dataclass
class Plan:
    """One call's arguments: tensor slots in an arena, and everything else by value."""
    stage: str
    slots: dict[str, Slot]
    values: dict[str, Any]                       # scalars, lists, None
    containers: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)  # host stages
    size: int = 0                                # arena bytes

    def kwargs_order(self, stage: Stage) -> list[str]:
        return [f.name for f in stage.inputs] + [f.name for f in stage.outputs if f.name in self.slots]


def plan(stage: Stage, example: Example, poison: int = POISON_A,
         guard: int = GUARD) -> tuple[Plan, np.ndarray]:
    """The plan of one call of `stage` on `example`, and its arena before the call."""
    inout = {f.name for f in stage.inputs if f.inout}
    slots, values, containers = {}, {}, {}
    offset = 0
    fills: list[tuple[Slot, int, np.ndarray | None]] = []
    for name, value in example.inputs.items():
        if stage.host and name in example.containers and value is not None:
            containers[name] = (example.containers[name], np.asarray(value))
        elif isinstance(value, np.ndarray):
            role = "inout" if name in inout else "input"
            layout = example.layouts.get(name) or contiguous_layout(value.ndim)
            slot = Slot(name, role, value.dtype.name, tuple(value.shape), layout, offset)
            slots[name] = slot
            fills.append((slot, guard, value))
            offset = aligned(slot.end)
        else:
            values[name] = scalar(value)
    for name, buf in example.outputs.items():
        slot = Slot(name, "output", buf.dtype, tuple(buf.shape), buf.layout or contiguous_layout(len(buf.shape)),
                    offset)
        slots[name] = slot
        fills.append((slot, poison, None))
        offset = aligned(slot.end)
    arena = np.empty(offset, np.uint8)
    for slot, byte, value in fills:
        arena[slot.offset:slot.end] = byte
        if value is not None:
            _, base, _ = slot.split(arena)
            view = slot.view_of(base)
            view[...] = value
    return Plan(stage.name, slots, values, containers, offset), arena


WIDE_PAST = 2**31      # the element offset the last step along a wide axis reaches (tests lower it on the CPU)
WIDE_ALIGN = 16        # a wide step is a multiple of this many elements (as engines' allocations are)


def wide_strides(shape: tuple[int, ...], strides: tuple[int, ...], axis: int) -> tuple[tuple[int, ...], int] | None:
    """(element strides, storage elements) of a view of `shape` whose steps along `axis` are a stride
    W < 2**31 apart, with (shape[axis] - 1) * W >= WIDE_PAST: the other axes lie densely inside one step, in
    the order of their `strides`. None where no such W exists (fewer than 3 steps, or an empty view)."""
    count = shape[axis]
    if count < 3 or 0 in shape:
        return None
    found = [0] * len(shape)
    inner = 1
    for a in sorted((a for a in range(len(shape)) if a != axis), key=lambda a: (strides[a], a)):
        found[a] = inner
        inner *= shape[a]
    step = max(inner, -(-WIDE_PAST // (count - 1)))
    step = -(-step // WIDE_ALIGN) * WIDE_ALIGN
    if step >= 2**31:
        return None
    found[axis] = step
    return tuple(found), (count - 1) * step + inner


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def scalar(value: Any) -> Any:
    """Python scalars for implementations: NumPy scalars become int, float or bool."""
    return value.item() if isinstance(value, np.generic) else value


def as_container(value: np.ndarray, container: str) -> Any:
    """A host-stage argument in the container the example names."""
    if container == "list":
        return value.tolist()
    if container == "ndarray":
        return value.copy()
    if container == "tensor":
        import torch

        return torch.from_numpy(value.copy())
    raise ValueError(f"containers: unknown container {container!r} (list, ndarray or tensor)")


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


class Bound:
    """A plan's arguments made real in one library on one device, over an arena."""

    def __init__(self, plan: Plan, arena: np.ndarray, lib: str, device: str):
        self.plan, self.arena, self.lib, self.device = plan, arena, lib, device
        self.kwargs: dict[str, Any] = {}
        self.device_slots: dict[str, Any] = {}     # CUDA: the device copy of each slot's bytes
        self.wide_views: dict[str, tuple[Any, Any]] = {}   # wide slots: (the slot's own view, the wide view)
        self.kept = False                          # a probe read the device slots itself (`keep_readings`)
        self.no_room = ""                          # why a wide storage could not be made (the call is not made)
        for name, value in plan.values.items():
            self.kwargs[name] = copy.deepcopy(value)
        for name, (container, value) in plan.containers.items():
            self.kwargs[name] = as_container(value, container)
        for name, slot in plan.slots.items():
            self.kwargs[name] = self.view(slot)

    def view(self, slot: Slot):
        if self.lib == "numpy":
            _, base, _ = slot.split(self.arena)
            return slot.view_of(base)
        import torch

        raw = torch.from_numpy(self.arena[slot.offset:slot.end])
        if self.device != "cpu":
            raw = raw.to(self.device)
            self.device_slots[slot.name] = raw
        start = GUARD_BYTES
        base = raw[start:start + slot.base_bytes].view(torch_dtype(slot.dtype)).view(slot.base_shape)
        view = slot.view_of(base)
        if slot.wide is None:
            return view
        elements = 1 + sum((n - 1) * s for n, s in zip(slot.shape, slot.wide))
        storage = self.wide_storage(elements, view)
        if storage is None:
            return view
        storage.view(torch.uint8).fill_(GUARD)
        wide = storage.as_strided(slot.shape, slot.wide)
        wide.copy_(view)
        self.wide_views[slot.name] = (view, wide)
        return wide

    def wide_storage(self, elements: int, like):
        """A storage of `elements` of `like`'s dtype on its device, or None (with `no_room` set) where the
        device has no room for it even after its cache is emptied: the suite's limit, not the callee's fault."""
        import torch

        for attempt in range(2):
            try:
                return torch.empty(elements, dtype=like.dtype, device=like.device)
            except torch.cuda.OutOfMemoryError:
                if attempt == 0 and like.device.type == "cuda":
                    torch.cuda.empty_cache()
        self.no_room = (f"a wide storage of {elements * like.element_size() / 2**30:.1f} GiB did not fit on "
                        f"{like.device}")
        return None

    def read_back(self) -> None:
        """Copy device slots back into the arena (CPU slots are the arena already); nothing when a probe
        has kept its own readings."""
        if self.kept:
            return
        if self.wide_views:
            self.narrow()
        for name, raw in self.device_slots.items():
            slot = self.plan.slots[name]
            self.arena[slot.offset:slot.end] = raw.cpu().numpy()

    def narrow(self) -> None:
        """Copy each wide view back into its slot, and give the wide storages back to the device (the next
        may be another process's)."""
        import torch

        for name, (view, wide) in self.wide_views.items():
            view.copy_(wide)
            self.kwargs[name] = view
        self.wide_views.clear()
        del view, wide
        if self.device != "cpu":
            torch.cuda.empty_cache()

    def keep_readings(self, readings: dict[str, np.ndarray]) -> None:
        """The device slots' bytes as a probe read them (on its own stream: `probes.stream_order`) become
        the arena's, and `read_back` reads the device no more. Every device slot must be read."""
        if readings.keys() != self.device_slots.keys():
            raise ValueError(f"readings of {sorted(readings)}: expected every device slot "
                             f"({sorted(self.device_slots)})")
        for name, data in readings.items():
            slot = self.plan.slots[name]
            self.arena[slot.offset:slot.end] = data
        self.kept = True

    def values_after(self) -> dict[str, Any]:
        """The non-tensor arguments as they are after the call (an implementation must not change them)."""
        return {name: self.kwargs[name] for name in (*self.plan.values, *self.plan.containers)}


def same_value(a: Any, b: Any) -> bool:
    """Exact equality of host values, container types and dtypes included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if type(a).__module__.startswith("torch"):  # by bytes, so a NaN equals itself
        import torch

        return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
                and (a.numel() == 0 or torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return a == b
