"""The words of one failure: what broke, on which input (the rows a person reads, the layouts, the first
differing value), and the command that replays its case file."""
from __future__ import annotations

import io
import shlex
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from specverify.judge.materialize import contiguous_layout, same_value
from specverify.records import backends, dialects
from specverify.records.stage import Example, Stage


def replay_command(path: Path, target) -> str:
    return replay_line(path, target.backend.name, target.source, target.device, target.dialect)


def replay_line(path: Path, backend: str, source: str, device: str, dialect: str = "") -> str:
    """The command that replays a case file on one implementation (judged by `dialect`, if any)."""
    which = f"--impl {source}" if backends.outside(backend) else f"--backend {backend}"
    under = f" --dialect {dialect}" if dialect else ""
    return f"specverify replay {shlex.quote(str(path))} {which} --device {device}{under}"


def failure_report(target, example: Example, exc: BaseException, command: str | None,
                   notes: list[str] = ()) -> str:
    """The whole story of one failure: what broke, on which input (a table a person reads), how to replay."""
    headline = getattr(exc, "headline", str(exc))
    tier = f"  tier: {example.tier}"
    if example.tier == "invalid":
        tier += f" ({example.bad_field}: {example.rule})"
    lines = [f"FAILED {headline}", tier]
    if target.dialect:
        lines.append(f"  judged by: {dialects.words(target.stage, target.dialect)}")
    detail = getattr(exc, "detail", "")
    if detail:
        lines += ["  " + line for line in detail.rstrip().splitlines()]
    strided = layouts_text(target.stage, example)
    if strided:
        lines.append(f"  strides (elements): {strided}")
    request, deciding = target.stage.deciding(example, getattr(exc, "at", None)) if target.stage.deciding \
        else (None, [])
    lines.append("  inputs:")
    lines += ["    " + line for line in inputs_table(target.stage, example, focus=request).rstrip().splitlines()]
    lines += ["    " + line for line in deciding]
    lines += [f"  note: {note}" for note in notes]
    if command:
        lines.append(f"  replay: {command}")
    return "\n".join(lines)


def layouts_text(stage: Stage, example: Example) -> str:
    """The strides of every strided field of an example (inputs and output buffers)."""
    parts = []
    for name, layout in example.layouts.items():
        value = example.inputs.get(name)
        if isinstance(value, np.ndarray) and layout != contiguous_layout(value.ndim):
            parts.append(f"{name} {list(value.shape)} stride {list(layout.strides(value.shape))}")
    for name, buf in example.outputs.items():
        if buf.layout is not None and buf.layout != contiguous_layout(len(buf.shape)):
            parts.append(f"{name} {list(buf.shape)} stride {list(buf.layout.strides(buf.shape))}")
    return "; ".join(parts)


def inputs_table(stage: Stage, example: Example, width: int = 110, focus: int | None = None) -> str:
    """The semantic inputs as a small table (the stage's row view, or one line per field), then the sizes
    (shape symbols: B, T, V, ...) and scalars. `focus`: a row of the row view (the failing request) shown
    even where it lies past the first rows."""
    from specverify.records.domain import symbol_values

    if stage.rows is not None:
        headers, rows = stage.rows(example)
    else:
        headers = ["field", "value"]
        rows = [[k, describe_value(v)] for k, v in example.inputs.items()]
    table = Table(*headers, box=None, pad_edge=False, show_edge=False)
    limit = 12
    shown = rows[:limit] + ([rows[focus]] if focus is not None and limit <= focus < len(rows) else [])
    for i, row in enumerate(shown):
        if i == limit:
            table.add_row(*[Text("...")] * len(headers))
        table.add_row(*[Text(str(x)) for x in row])   # Text: "[0.5]" is a value, not rich markup
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, soft_wrap=False, emoji=False).print(table)
    more = f"  ... {len(rows) - len(shown)} more rows\n" if len(rows) > len(shown) else ""
    none = "(no rows: an empty batch)\n" if not rows else ""
    sizes = [f"{k} = {v}" for k, v in symbol_values(stage, example).items()]
    scalars = [f"{k} = {v!r}" for k, v in example.inputs.items()
               if stage.rows is not None and not isinstance(v, (np.ndarray, list, type(None)))]
    return out.getvalue() + none + more + ("sizes: " + ", ".join(sizes) + "\n" if sizes else "") + \
        ("; ".join(scalars) + "\n" if scalars else "")


def describe_value(value: Any, limit: int = 16) -> str:
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)[:limit].tolist()
        tail = " ..." if value.size > limit else ""
        return f"{value.dtype}{list(value.shape)} {flat}{tail}"
    return repr(value)


def first_value_difference(expected: Any, actual: Any, path: str) -> str | None:
    """Where two host values first differ, types included (None when equal)."""
    if type(expected) is not type(actual):
        return (f"{path}: expected a {type(expected).__name__} ({expected!r:.60}), "
                f"got a {type(actual).__name__} ({actual!r:.60})")
    if isinstance(expected, (list, tuple)):
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = first_value_difference(e, a, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(actual):
            return f"{path}: expected length {len(expected)}, got {len(actual)}"
        return None
    if isinstance(expected, dict):
        if expected.keys() != actual.keys():
            return f"{path}: expected keys {sorted(expected)}, got {sorted(actual)}"
        for k in expected:
            found = first_value_difference(expected[k], actual[k], f"{path}[{k!r}]")
            if found:
                return found
        return None
    if not same_value(expected, actual):
        return f"{path}: expected {expected!r}, got {actual!r}"
    return None
