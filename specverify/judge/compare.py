"""Byte comparison of argument slots, and the words a difference is reported in."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specverify.judge.materialize import Slot
from specverify.records.values import GUARD, GUARD_B, poison_text, raw_hex, show

KINDS = ("wrong value", "missing write", "stray write", "write into a gap")


@dataclass
class Difference:
    """The first differing element of one slot, and counts of every kind of difference."""
    field: str
    where: str          # "[2, 1]" in the view, or " storage gap at base [2, 9]"
    kind: str           # one of KINDS, or a guard write
    expected: str = ""
    actual: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    text: str = ""      # a whole message instead of expected/actual (guards, buffers)
    index: tuple[int, ...] | None = None   # the element's position in the view (None: in a gap or a guard)

    def line(self) -> str:
        if self.text:
            return self.text
        tally = ", ".join(f"{n} {k}" for k, n in self.counts.items() if n)
        return (f"{self.field}{self.where}: {self.kind}: expected {self.expected}, got {self.actual}"
                f"  ({tally})")


def element(array: np.ndarray, index: tuple[int, ...]) -> np.ndarray:
    """array[index] as a one-element array: its bytes as stored (indexing a bool array to a scalar would
    turn any nonzero byte into True)."""
    return array[tuple(slice(i, i + 1) for i in index)]


def element_bytes_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element: does any byte differ?"""
    itemsize = a.dtype.itemsize
    da = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(-1, itemsize)
    db = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(-1, itemsize)
    return (da != db).any(axis=1).reshape(a.shape)


def guard_difference(slot: Slot, before: np.ndarray, after: np.ndarray, what: str) -> Difference | None:
    """A write into the guard before or after a slot (`what`: "" for outputs, "input " for inputs)."""
    front_b, _, back_b = slot.split(before)
    front_a, _, back_a = slot.split(after)
    size = slot.itemsize
    changed = np.nonzero(back_a != back_b)[0]
    if len(changed):
        n = int(changed.max()) // size + 1
        return Difference(slot.name, "", "write past the end", text=(
            f"write past the end of {what}`{slot.name}` by {n} element{'s' * (n > 1)} "
            f"({len(changed)} guard byte(s) changed)"))
    changed = np.nonzero(front_a != front_b)[0]
    if len(changed):
        n = (len(front_b) - int(changed.min()) + size - 1) // size
        return Difference(slot.name, "", "write before the start", text=(
            f"write before the start of {what}`{slot.name}` by {n} element{'s' * (n > 1)} "
            f"({len(changed)} guard byte(s) changed)"))
    return None


def compare_output(slot: Slot, expected: np.ndarray, actual: np.ndarray, defined: np.ndarray,
                   before: np.ndarray) -> Difference | None:
    """Compare one output slot byte for byte: its guards, then its whole base.

    expected/actual/before: arenas after the oracle's call, after the implementation's call, and before
    any call; defined: per base element, whether the stage writes it.
    """
    guard = guard_difference(slot, before, actual, "")
    if guard is not None:
        return guard
    _, exp, _ = slot.split(expected)
    _, act, _ = slot.split(actual)
    _, poison, _ = slot.split(before)
    differs = element_bytes_differ(exp, act)
    if not differs.any():
        return None
    layout = slot.layout
    in_view = layout.view_mask(slot.shape)
    still_poison = ~element_bytes_differ(act, poison)
    kinds = np.full(exp.shape, "", dtype=object)
    kinds[differs & in_view & defined & still_poison] = "missing write"
    kinds[differs & in_view & defined & ~still_poison] = "wrong value"
    kinds[differs & in_view & ~defined] = "stray write"
    kinds[differs & ~in_view] = "write into a gap"
    counts = {k: int((kinds == k).sum()) for k in KINDS}
    first = tuple(int(i) for i in np.argwhere(differs)[0])
    index = tuple(int(i) for i in layout.view_position(first)) if in_view[first] else None
    if index is not None:
        where = "[" + ", ".join(map(str, index)) + "]"
    else:
        where = f" storage gap at base [{', '.join(map(str, first))}]"

    def shown(value) -> str:
        raw = np.asarray(value).tobytes()
        if raw == element(poison, first).tobytes():   # an in-place input holds its input there, not poison
            return f"{show(value)} (unchanged: its value before the call)" if slot.role == "inout" \
                else poison_text(value)
        if raw in (bytes([GUARD]) * len(raw), bytes([GUARD_B]) * len(raw)):
            return f"an input's guard bytes ({raw_hex(value)}): read outside an input?"
        return show(value)

    return Difference(slot.name, where, kinds[first], shown(element(exp, first)), shown(element(act, first)), counts,
                      index=index)


def compare_untouched(slot: Slot, actual: np.ndarray, writable: np.ndarray, before: np.ndarray) -> Difference | None:
    """Hazard tier: every element outside `writable` (per base element) still holds its poison."""
    guard = guard_difference(slot, before, actual, "")
    if guard is not None:
        return guard
    _, act, _ = slot.split(actual)
    _, poison, _ = slot.split(before)
    stray = element_bytes_differ(act, poison) & ~writable
    if not stray.any():
        return None
    in_view = slot.layout.view_mask(slot.shape)
    first = tuple(int(i) for i in np.argwhere(stray)[0])
    index = tuple(int(i) for i in slot.layout.view_position(first)) if in_view[first] else None
    if index is not None:
        where, kind = "[" + ", ".join(map(str, index)) + "]", "stray write"
    else:
        where, kind = f" storage gap at base [{', '.join(map(str, first))}]", "write into a gap"
    return Difference(slot.name, where, kind, poison_text(element(poison, first)), show(element(act, first)),
                      {"stray write": int((stray & in_view).sum()), "write into a gap": int((stray & ~in_view).sum())},
                      index=index)


def input_difference(slot: Slot, before: np.ndarray, after: np.ndarray) -> str | None:
    """How the call changed an input slot: its guards, its gaps, or (not for in-place inputs) its view."""
    guard = guard_difference(slot, before, after, "input ")
    if guard is not None:
        return guard.text
    if np.array_equal(before[slot.offset:slot.end], after[slot.offset:slot.end]):   # the common case, fast
        return None
    _, b, _ = slot.split(before)
    _, a, _ = slot.split(after)
    differs = element_bytes_differ(b, a)
    if not differs.any():
        return None
    in_view = slot.layout.view_mask(slot.shape)
    gaps = differs & ~in_view
    if gaps.any():
        first = tuple(int(i) for i in np.argwhere(gaps)[0])
        return f"wrote into the storage gaps of input `{slot.name}` (base [{', '.join(map(str, first))}])"
    if slot.role == "inout":
        return None
    first = tuple(int(i) for i in np.argwhere(differs)[0])
    at = ", ".join(map(str, slot.layout.view_position(first)))
    return f"changed its input `{slot.name}` at [{at}]: was {show(element(b, first))}, now {show(element(a, first))}"
