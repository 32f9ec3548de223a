"""How the suite's arrays are made and shown: dtypes by name (ml_dtypes' included), the poison and guard
bytes every arena is filled with, poison-filled arrays, and an element of an output as a report prints
it (its value and a float's bits, or the poison named as such). Used by the strategies, the arenas and
the reports alike."""
from __future__ import annotations

import numpy as np

POISON_A = 0xA5   # output fill for every implementation
POISON_B = 0x5A   # second fill for the oracle: bytes equal under both fills are the ones it wrote
GUARD = 0xC3      # inputs' guards and gaps
GUARD_B = 0x3C    # second guard pattern: an output that changes with it read outside an input
GUARD_BYTES = 256  # each side of every slot
ALIGN = 256        # slot starts: enough for any vector load a kernel may assume

# dtypes NumPy lacks (ml_dtypes' NumPy types), handed to torch by same-width bit views
EXTRA_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def np_dtype(name: str) -> np.dtype:
    """A NumPy dtype by name, ml_dtypes' types included."""
    if name in EXTRA_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def filled(shape: tuple[int, ...], dtype: np.dtype, byte: int) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    return np.full(count * dtype.itemsize, byte, np.uint8).view(dtype).reshape(shape)


def show(value: np.ndarray) -> str:
    """One element as its value and, for floats, its bits."""
    value = np.asarray(value).reshape(1)
    bits = value.view(np.uint8).tobytes()[::-1].hex()
    if value.dtype.kind == "b":
        raw = int(value.view(np.uint8)[0])
        return f"{bool(raw)!r}" if raw in (0, 1) else f"bool byte 0x{raw:02x}"
    item = value[0].item()
    if value.dtype.kind in "iu":
        return f"{item!r}"
    return f"{float(item)!r} (0x{bits})"


def raw_hex(value: np.ndarray) -> str:
    return "0x" + np.asarray(value).reshape(1).view(np.uint8).tobytes()[::-1].hex()


def poisoned(values: np.ndarray) -> np.ndarray:
    """Per element of an output: does it still hold the harness's poison (every byte POISON_A)?"""
    values = np.asarray(values)
    if not values.size:
        return np.zeros(values.shape, bool)
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8).reshape(values.size, values.dtype.itemsize)
    return (raw == POISON_A).all(axis=1).reshape(values.shape)


def poison_text(value: np.ndarray) -> str:
    """The poison as a report prints it: "0xA5A5A5A5 (poison: never written)"."""
    return f"0x{raw_hex(value)[2:].upper()} (poison: never written)"


def output_value(value) -> str:
    """One element of an output, as a report prints it: its value (`show`), or the poison, named as such."""
    value = np.asarray(value).reshape(1)
    return poison_text(value) if poisoned(value)[0] else show(value)


def output_values(values, limit: int = 12) -> str:
    """Elements of an output as a list a person reads: "[3, 5, poison, poison] (poison: 0xA5A5A5A5, never
    written)"; at most `limit` of them."""
    values = np.asarray(values).reshape(-1)
    marks = poisoned(values)
    cells = ["poison" if m else str(v.item()) if values.dtype.kind in "iub" else str(v)
             for v, m in zip(values[:limit], marks[:limit])]
    text = "[" + ", ".join(cells) + (", ...]" if len(values) > limit else "]")
    if not marks[:limit].any():
        return text
    return f"{text} (poison: {poison_text(values[int(np.argmax(marks))]).split(' ')[0]}, never written)"
