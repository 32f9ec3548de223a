"""Byte comparison of output buffers, and the words a difference is reported in."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.materialize import GUARD
from specverify.stage import Layout


@dataclass
class Difference:
    """The first differing element of one output buffer, and counts of every kind of difference."""
    field: str
    where: str          # "[2, 1]" in the view, or "storage gap at base [2, 9]"
    kind: str           # "wrong value", "missing write", "stray write", "write into a gap"
    expected: str
    actual: str
    counts: dict[str, int]

    def line(self) -> str:
        tally = ", ".join(f"{n} {k}" for k, n in self.counts.items() if n)
        return (f"{self.field}{self.where}: {self.kind}: expected {self.expected}, got {self.actual}"
                f"  ({tally})")


def show(value: np.ndarray) -> str:
    """One element as its value and, for floats, its bits."""
    value = np.asarray(value).reshape(1)
    item = value[0].item()
    bits = value.view(np.uint8).tobytes()[::-1].hex()
    if value.dtype.kind == "f":
        return f"{item!r} (0x{bits})"
    if value.dtype.kind == "b":
        raw = int(value.view(np.uint8)[0])
        return f"{item!r}" if raw in (0, 1) else f"bool byte 0x{raw:02x}"
    return f"{item!r}"


def element_bytes_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element of the base: does any byte differ?"""
    itemsize = a.dtype.itemsize
    da = a.reshape(-1).view(np.uint8).reshape(-1, itemsize)
    db = b.reshape(-1).view(np.uint8).reshape(-1, itemsize)
    return (da != db).any(axis=1).reshape(a.shape)


def compare_buffer(field: str, expected: np.ndarray, actual: np.ndarray, defined: np.ndarray,
                   poison: np.ndarray, layout: Layout, view_shape: tuple[int, ...]) -> Difference | None:
    """Compare one whole base allocation byte for byte.

    expected/actual: the base after the oracle's and the implementation's call; defined: per base element,
    whether the stage writes it; poison: the base before the call (what an unwritten element holds).
    """
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return Difference(field, "", "buffer changed", f"{expected.dtype}{list(expected.shape)}",
                          f"{actual.dtype}{list(actual.shape)}", {})
    differs = element_bytes_differ(expected, actual)
    if not differs.any():
        return None
    in_view = layout.view_mask(view_shape)
    still_poison = ~element_bytes_differ(actual, poison)
    kinds = np.full(expected.shape, "", dtype=object)
    kinds[differs & in_view & defined & still_poison] = "missing write"
    kinds[differs & in_view & defined & ~still_poison] = "wrong value"
    kinds[differs & in_view & ~defined] = "stray write"
    kinds[differs & ~in_view] = "write into a gap"
    order = ("wrong value", "missing write", "stray write", "write into a gap")
    counts = {k: int((kinds == k).sum()) for k in order}
    first = tuple(int(i) for i in np.argwhere(differs)[0])
    if in_view[first]:
        where = "[" + ", ".join(str(i // s) for i, s in zip(first, layout.step)) + "]"
    else:
        where = f" storage gap at base [{', '.join(map(str, first))}]"
    def shown(value) -> str:
        raw = np.asarray(value).tobytes()
        if raw == np.asarray(poison[first]).tobytes():
            return f"untouched ({show(value)})"
        if raw == bytes([GUARD]) * len(raw):   # copied from the gap of a strided input
            return f"an input's guard bytes ({show(value)}): read outside an input's view?"
        return show(value)

    return Difference(field, where, kinds[first], shown(expected[first]), shown(actual[first]), counts)
