"""The inputs that decide a failing output element of a probability-reading rejection stage, for the failure
report: the request the element belongs to and that request's probability and noise rows (the stage's row
view shows ids and uniforms, not rows of V values).

`rejection_rows(example, at)` is a `Stage.deciding`: given the first wrong output element (field, view
index; None where the harness could not locate it), (the failing request: the row of the row view, its
probability and noise rows as lines). Rows of up to SHORT_ROW values are shown whole; longer ones by the
entries that decide a pick (its first ones, the drafted id, the largest value, the first non-finite ones,
the last), each with its index, so a line stays within a width a person reads.
"""
from __future__ import annotations

import textwrap

import numpy as np

from specverify.records.stage import Example

PER_TOKEN = ("target_probs", "draft_probs")   # [T, V] (flat, by cu_num_draft_tokens) or [B, K(+1), V]
PER_REQUEST = ("inv_q",)                      # [B, V]: the request's exponential noise
SHORT_ROW = 8                                 # values of a row shown whole
MOST_ROWS = 6                                 # rows of one table shown per request
WIDTH = 110                                   # characters of a line, longer ones wrapped


def number(value) -> str:
    """An f32 value as its shortest round-trip text ("0.25", "nan", "-0.0")."""
    return str(np.float32(value))


def row_text(values: np.ndarray, drafted: int | None = None) -> str:
    """One row of V values: whole when short, else its deciding entries with their indices."""
    values = np.asarray(values).reshape(-1)
    if len(values) <= SHORT_ROW:
        return "[" + ", ".join(number(v) for v in values) + "]"
    finite = np.isfinite(values)
    picked = {0: "", len(values) - 1: ""}
    if finite.any():
        picked[int(np.flatnonzero(finite)[np.argmax(values[finite])])] = " (max)"
    for i in np.flatnonzero(~finite)[:2]:
        picked.setdefault(int(i), "")
    if drafted is not None and 0 <= drafted < len(values):
        picked[drafted] = picked.get(drafted, "") + " (drafted)"
    parts, last = [], -1
    for i in sorted(picked):
        if i > last + 1:
            parts.append("...")
        parts.append(f"{i}: {number(values[i])}{picked[i]}")
        last = i
    return f"({len(values)} values) [{', '.join(parts)}]"


def requests(x: dict) -> int:
    for name in ("cu_num_draft_tokens", "bonus_token_ids", "candidates", "draft_token_ids"):
        if isinstance(x.get(name), np.ndarray) and (name != "draft_token_ids" or x[name].ndim == 2):
            return len(x[name])
    return 0


def request_of(x: dict, at: tuple[str, tuple[int, ...]] | None) -> int | None:
    """The request an output element belongs to (None when not known)."""
    if at is None or not at[1]:
        return None
    field, index = at
    if field == "recovered_token_ids":                  # [T]: a flat draft position
        return int(np.searchsorted(x["cu_num_draft_tokens"], index[0], side="right"))
    if field == "predicts":                             # [B*(K+1)]
        return index[0] // x["candidates"].shape[1]
    return index[0]                                     # [B, ...]


def token_rows(x: dict, name: str, request: int) -> list[tuple[tuple[int, ...], int | None]]:
    """(row index, drafted id there) of each row of table `name` that belongs to `request`."""
    table = x[name]
    if table.ndim == 2:                                 # flat tokens
        cu = x["cu_num_draft_tokens"]
        start = 0 if request == 0 else int(cu[request - 1])
        drafts = x["draft_token_ids"]
        return [((t,), int(drafts[t])) for t in range(start, int(cu[request]))]
    if "candidates" in x:                               # chain: row k follows candidates[b, k + 1]
        width = x["candidates"].shape[1]
        return [((request, k), int(x["candidates"][request, k + 1]) if k + 1 < width else None)
                for k in range(table.shape[1])]
    drafts = x["draft_token_ids"]
    return [((request, k), int(drafts[request, k]) if k < drafts.shape[1] else None) for k in range(table.shape[1])]


def rejection_rows(example: Example, at: tuple[str, tuple[int, ...]] | None) -> tuple[int | None, list[str]]:
    """(the failing request, its probability and noise rows as lines); where the element is not known, the
    rows of the first request."""
    x = example.inputs
    count = requests(x)
    if not count:
        return None, []
    request = request_of(x, at)
    shown = request if request is not None and 0 <= request < count else 0
    lines = [f"request {shown}" + ("" if request is not None else " (the failing element was not located)")
             + ": the rows that decide its outputs"]
    for name in PER_TOKEN:
        if isinstance(x.get(name), np.ndarray):
            rows = token_rows(x, name, shown)
            lines += [f"  {name}[{', '.join(map(str, index))}] = {row_text(x[name][index], drafted)}"
                      for index, drafted in rows[:MOST_ROWS]]
            lines += [f"  ... {len(rows) - MOST_ROWS} more rows of {name}"] if len(rows) > MOST_ROWS else []
    for name in PER_REQUEST:
        if isinstance(x.get(name), np.ndarray) and shown < len(x[name]):
            lines.append(f"  {name}[{shown}] = {row_text(x[name][shown])}")
    return request, [part for line in lines for part in textwrap.wrap(line, WIDTH, subsequent_indent=" " * 6,
                                                                        break_on_hyphens=False)]
