"""Rendering for the terminal: failure reports, the summary table and coverage tables (the files a run
writes, JSON, JUnit and Markdown, are `reports.py`)."""
from __future__ import annotations

import io
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from specverify import dialects
from specverify.materialize import contiguous_layout, same_value
from specverify.stage import Example, Stage


def replay_command(path: Path, target) -> str:
    return replay_line(path, target.backend.name, target.source, target.device, target.dialect)


def replay_line(path: Path, backend: str, source: str, device: str, dialect: str = "") -> str:
    """The command that replays a case file on one implementation (judged by `dialect`, if any)."""
    which = f"--impl {source}" if backend == "impl" else f"--backend {backend}"
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
    from specverify.domain import symbol_values

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


STATUS_TEXT = {"passed": "passed", "failed": "[red]FAILED[/red]", "error": "[red]ERROR[/red]",
               "xfailed": "failed as expected", "waived": "not launched (waiver)"}


def incomplete_counts(examples: int, planned: int) -> str:
    """What an incomplete check ran: "44 of 100 examples, all passed" ("0 of 25 examples: not started")."""
    return f"{examples} of {planned} example{'s' * (planned != 1)}" + \
        (", all passed" if examples else ": not started")


def summary_table(outcomes: list) -> Table:
    table = Table("stage", "backend", "device", "check", "examples", "result", "time", title="specverify check")
    for o in outcomes:
        result = STATUS_TEXT.get(o.status, f"skipped: {o.headline}") if o.status != "incomplete" else \
            f"[yellow]incomplete[/yellow] ({incomplete_counts(o.examples, o.planned)})"
        if o.measures:
            result += " (" + ", ".join(f"{k} {v}" for k, v in o.measures.items()) + ")"
        found = f", failed at {o.found_after}" if o.found_after else ""
        stage = f"{o.stage} ({o.dialect})" if o.dialect else o.stage
        table.add_row(stage, o.backend, o.device, o.check, f"{o.examples}{found}" if o.examples else "-", result,
                      f"{o.seconds:.1f}s")
    return table


def coverage_tables(outcomes: list) -> list[Table]:
    """Each stage's equivalence classes (strategy labels) and how many draws fell in each."""
    by_stage: dict[str, Counter] = {}
    for o in outcomes:
        by_stage.setdefault(o.stage, Counter()).update(o.coverage)
    tables = []
    for stage, seen in by_stage.items():
        table = Table("class", "draws", title=f"{stage}: what the draws covered (all backends)")
        for name, count in sorted(seen.items()):
            table.add_row(name, str(count))
        tables.append(table)
    return tables


EXAMPLES_NOTE = ("examples: inputs drawn and judged, shrinking included; \"failed at N\": the N-th input drawn was "
                 "the first that failed (the report shows the smallest failing input found)")
TOTAL_ORDER = ("passed", "failed", "error", "incomplete", "xfailed", "waived", "skipped")
TOTAL_NAMES = {"error": "broke", "xfailed": "failed as expected", "waived": "not launched (waived)"}


def totals_line(outcomes: list, seconds: float) -> str:
    """ "262 checks of 101 targets in 95.3 s: 260 passed, 2 failed"."""
    ran = [o for o in outcomes if o.check != "-"]
    counts = Counter(o.status for o in ran)
    targets = {(o.stage, o.backend, o.device, o.source, o.dialect) for o in ran}
    parts = [f"{counts[s]} {TOTAL_NAMES.get(s, s)}" for s in TOTAL_ORDER if counts.get(s)]
    parts += [f"{n} {s}" for s, n in counts.items() if s not in TOTAL_ORDER]
    return (f"{len(ran)} check{'s' * (len(ran) != 1)} of {len(targets)} target{'s' * (len(targets) != 1)} "
            f"in {seconds:.1f} s: {', '.join(parts) or 'none ran'}")


def verdict_lines(run) -> list[str]:
    """The verdict of each outside implementation by level, and why levels were not asked (once per reason)."""
    from specverify.conformance import not_asked, verdicts

    found = verdicts(run.outcomes)
    lines = ["verdict by level (contract = valid tier, robustness = hazard tier, arguments = invalid tier):"]
    return lines + [f"  {line}" for line in [v.line() for v in found] + not_asked(found)]


def run_lines(run, outside: bool) -> list[str]:
    """What a run says after its table (the CLI) or its tests (pytest): each failure's report (`failures`),
    the notes, the verdicts of outside implementations, the stages a vendor does not implement and the
    waivers' states."""
    from specverify.reports import STATE_WORDS

    lines = []
    for o in run.outcomes:
        lines += [f"note: {o.stage} {o.check}: {note}" for note in o.notes]
    if outside:
        lines += verdict_lines(run)
    if run.not_implemented:
        lines.append(f"not implemented by {run.vendor.name} ({len(run.not_implemented)}): "
                     f"{', '.join(run.not_implemented)}")
    if run.waivers is not None:
        lines.append(f"waivers ({run.waivers.path}):")
        lines += [f"  {w.label} [{w.mode}] {w.scope}: {STATE_WORDS[w.state]}" for w in run.waivers.entries]
    return lines
