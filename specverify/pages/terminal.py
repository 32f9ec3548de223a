"""Rendering for the terminal: the summary table, coverage tables, totals and what a run says after its
table (a failure's own words are `specverify.judge.failure_report`; the files a run writes, JSON, JUnit
and Markdown, are `report_files`)."""
from __future__ import annotations

from collections import Counter

from rich.table import Table

from specverify.runs.verdicts import incomplete_counts, not_asked, verdicts
from specverify.runs.waivers import STATE_WORDS

STATUS_TEXT = {"passed": "passed", "failed": "[red]FAILED[/red]", "error": "[red]ERROR[/red]",
               "xfailed": "failed as expected", "waived": "not launched (waiver)"}


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


def coverage_tables(outcomes: list, stages: dict) -> list[Table]:
    """Each stage's equivalence classes (strategy labels) and how many examples fell in each, all checks and
    backends together; a class the record names (`Stage.floors`, from `stages`) also shows its floor and the
    fewest examples of it one target's check of that tier drew, in red when under the floor (floors are set
    for the ci budget)."""
    by_stage: dict[str, Counter] = {}
    fewest: dict[tuple[str, str, str], int] = {}
    for o in outcomes:
        by_stage.setdefault(o.stage, Counter()).update(o.coverage)
        stage = stages.get(o.stage)
        for floor in stage.floors if stage is not None else ():
            if o.check == floor.tier:
                key = (o.stage, floor.tier, floor.label)
                fewest[key] = min(fewest.get(key, o.coverage[floor.label]), o.coverage[floor.label])
    tables = []
    for name, seen in by_stage.items():
        floors = {floor.label: floor for floor in stages[name].floors} if name in stages else {}
        table = Table("class", "examples", "floor", "fewest in a target's check",
                      title=f"{name}: what the draws covered (all checks and backends)")
        for label in sorted(set(seen) | set(floors)):
            floor = floors.get(label)
            if floor is None:
                table.add_row(label, str(seen[label]), "", "")
                continue
            least = fewest.get((name, floor.tier, label))
            shown = "-" if least is None else str(least) if least >= floor.least else f"[red]{least} (under)[/red]"
            table.add_row(f"[bold]{label}[/bold]", str(seen[label]), f"{floor.least} ({floor.tier})", shown)
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
    found = verdicts(run.outcomes)
    lines = ["verdict by level (contract = valid tier, robustness = hazard tier, arguments = invalid tier):"]
    return lines + [f"  {line}" for line in [v.line() for v in found] + not_asked(found)]


def run_lines(run, outside: bool) -> list[str]:
    """What a run says after its table (the CLI) or its tests (pytest): each failure's report (`failures`),
    the notes, the verdicts of outside implementations, the stages a vendor does not implement and the
    waivers' states."""
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
