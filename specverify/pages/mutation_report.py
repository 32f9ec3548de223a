"""Reports of a mutation run (`specverify.mutation.mutation_run.MutationRun`): terminal, JSON, Markdown,
saying the same.

Per stage: the baseline, how many mutants were found and run, the count of each outcome, the kill rate
(kills = killed + timed out + crashed, over kills and survivors not judged equivalent), the rate of
"killed" alone, and the median of the examples the searches drew until they failed. Then one line per
killed mutant (id, file:line, the edit before -> after, the check that killed it, its examples, its case),
the survivors with their diffs (for the vendor to judge: equivalent, or a gap in the suite), the ones
judged equivalent with the reason, and the equivalence file's stale ids. JSON (FORMAT) and Markdown are
written whole or not at all.
"""
from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

import specverify
from specverify.mutation.mutation_run import KILLS, MutationRun, Result, StageRun, kill_rates, median_examples
from specverify.pages.matrix import MUTATION_FORMAT as FORMAT

COLUMNS = (("killed", "killed"), ("timed out", "timed out"), ("crashed", "crashed"), ("survived", "survived"),
           ("equivalent", "equivalent (judged)"), ("does not import", "does not import"),
           ("does not compile", "does not compile"), ("error", "broke"))


def percent(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.0f}%"


def where(r: Result) -> str:
    return f"{r.mutant.path}:{r.mutant.line}"


def edit(r: Result) -> str:
    return f"{r.mutant.before} → {r.mutant.after}"


class Originals:
    """The original source of each mutated file, read once (for diffs)."""

    def __init__(self):
        self.found: dict[str, str] = {}

    def diff(self, r: Result) -> str:
        if r.mutant.path not in self.found:
            try:
                self.found[r.mutant.path] = Path(r.mutant.path).read_text()
            except OSError:
                self.found[r.mutant.path] = ""
        return r.mutant.diff(self.found[r.mutant.path])


def stage_summary(stage: StageRun) -> dict:
    counts = stage.counts()
    rate, killed = kill_rates(counts)
    return {"counts": counts, "kill_rate": rate, "killed_rate": killed, "median_examples": median_examples(stage.results)}


# --- JSON ----------------------------------------------------------------------------------------------

def result_json(r: Result, originals: Originals) -> dict:
    m = r.mutant
    return {"id": m.id, "module": m.module, "path": m.path, "line": m.line, "col": m.col, "scope": m.scope,
            "operator": m.operator, "before": m.before, "after": m.after, "outcome": r.outcome,
            "equivalent": r.judged if r.equivalent else None, "check": r.check, "headline": r.headline,
            "examples": r.examples, "case": r.case, "seconds": round(r.seconds, 3),
            "diff": originals.diff(r) if r.outcome == "survived" else None}


def to_json(run: MutationRun) -> dict:
    originals = Originals()
    o = run.options
    rate, killed = kill_rates(run.counts())
    return {"format": FORMAT, "suite": {"name": "specverify", "version": specverify.__version__},
            "started": run.started, "profile": o.profile, "seed": o.seed, "examples": o.examples,
            "device": o.device, "equivalent_file": run.equivalent_file, "stale": run.stale,
            "stages": [{"stage": s.subject.stage, "impl": s.subject.impl, "vendor": s.subject.vendor,
                        "baseline": s.baseline, "baseline_seconds": round(s.baseline_seconds, 3),
                        "enumerated": s.enumerated, "run": len(s.results), **stage_summary(s),
                        "mutants": [result_json(r, originals) for r in s.results]} for s in run.stages],
            "totals": {"counts": run.counts(), "kill_rate": rate, "killed_rate": killed}}


# --- terminal ------------------------------------------------------------------------------------------

def summary_table(run: MutationRun) -> Table:
    table = Table("stage", "implementation", "baseline", "mutants", *[title for _, title in COLUMNS],
                  "kill rate", "killed alone", "median examples", title="specverify mutate")
    for s in run.stages:
        found = stage_summary(s)
        counts = found["counts"]
        table.add_row(s.subject.stage, s.subject.impl, "passed" if s.baseline == "passed" else "FAILED",
                      f"{len(s.results)}/{s.enumerated}", *[str(counts[key]) for key, _ in COLUMNS],
                      percent(found["kill_rate"]), percent(found["killed_rate"]),
                      "-" if found["median_examples"] is None else f"{found['median_examples']:g}")
    return table


def lines(run: MutationRun) -> list[str]:
    """Everything the table does not say, one line (or a diff) at a time; plain text for the terminal."""
    originals = Originals()
    out: list[str] = []
    for s in run.stages:
        if s.baseline != "passed":
            out.append(f"{s.subject.stage} ({s.subject.impl}): not mutated: the unmutated implementation "
                       f"fails ({s.baseline}); fix it or waive it first")
        for r in s.results:
            if r.outcome in KILLS:
                examples = f", {r.examples} example(s)" if r.examples is not None else ""
                case = f", case {r.case}" if r.case else ""
                out.append(f"{r.outcome:9} {r.mutant.id}  {where(r)}  {edit(r)}  [{r.check or '-'}{examples}]"
                           f"{case}: {r.headline}")
        for r in s.results:
            if r.outcome in ("does not import", "does not compile", "error"):
                out.append(f"apart     {r.mutant.id}  {where(r)}  {edit(r)}: {r.outcome}: {r.headline}")
        for r in s.results:
            if r.equivalent:
                out.append(f"equivalent (judged): {r.judged}  {r.mutant.id}  {where(r)}  {edit(r)}")
        for r in s.results:
            if r.outcome == "survived" and not r.equivalent:
                out.append(f"SURVIVED  {r.mutant.id}  {where(r)}  {edit(r)}: no check failed; equivalent, or a "
                           f"gap to report?\n{originals.diff(r)}")
    for i in run.stale:
        out.append(f"equivalence file {run.equivalent_file}: STALE: {i} names no mutant of this run")
    rate, killed = kill_rates(run.counts())
    out.append(f"kill rate {percent(rate)} (killed alone {percent(killed)}) over {len(run.stages)} stage(s)")
    return out


# --- Markdown ------------------------------------------------------------------------------------------

def md(text: str) -> str:
    """Text inside a Markdown table cell or code span, kept on one line."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("`", "'")


def markdown(run: MutationRun) -> str:
    o = run.options
    out = ["# specverify mutate", "",
           f"specverify {specverify.__version__}, profile `{o.profile}`, seed {o.seed}, "
           f"{'examples ' + str(o.examples) if o.examples else 'the profile examples'}, device `{o.device}`.", "",
           "| stage | implementation | baseline | mutants | " + " | ".join(t for _, t in COLUMNS)
           + " | kill rate | killed alone | median examples |",
           "|" + " --- |" * (len(COLUMNS) + 7)]
    for s in run.stages:
        found = stage_summary(s)
        counts = found["counts"]
        out.append(f"| `{s.subject.stage}` | `{md(s.subject.impl)}` | "
                   f"{'passed' if s.baseline == 'passed' else 'FAILED: ' + md(s.baseline)} | "
                   f"{len(s.results)}/{s.enumerated} | " + " | ".join(str(counts[k]) for k, _ in COLUMNS)
                   + f" | {percent(found['kill_rate'])} | {percent(found['killed_rate'])} | "
                   f"{'-' if found['median_examples'] is None else format(found['median_examples'], 'g')} |")
    rate, killed = kill_rates(run.counts())
    out += ["", f"Kill rate {percent(rate)} (killed alone {percent(killed)}).", ""]
    results = [(s, r) for s in run.stages for r in s.results]
    done = [(s, r) for s, r in results if r.outcome != "survived"]
    if done:
        out += ["## Mutants killed or counted apart", "",
                "| stage | mutant | where | edit | outcome | check | examples | case |", "|" + " --- |" * 8]
        out += [f"| `{s.subject.stage}` | `{md(r.mutant.id)}` | `{md(where(r))}` | `{md(edit(r))}` | {r.outcome} | "
                f"{r.check or '-'} | {'-' if r.examples is None else r.examples} | "
                f"{'`' + md(r.case) + '`' if r.case else '-'} |" for s, r in done]
        out.append("")
    originals = Originals()
    survivors = [(s, r) for s, r in results if r.outcome == "survived"]
    if survivors:
        out += ["## Survivors", ""]
        for s, r in survivors:
            judged = f"equivalent (judged): {md(r.judged)}" if r.equivalent else \
                "**survived**: equivalent, or a gap to report"
            out += [f"- `{s.subject.stage}` `{md(r.mutant.id)}` at `{md(where(r))}`: `{md(edit(r))}`: {judged}", "",
                    "  ```diff", *["  " + line for line in originals.diff(r).splitlines()], "  ```", ""]
    if run.stale:
        out += ["## Stale equivalence entries", ""] + [f"- `{md(i)}` names no mutant of this run" for i in run.stale]
        out.append("")
    failed = [s for s in run.stages if s.baseline != "passed"]
    if failed:
        out += ["## Not mutated (the baseline fails)", ""] + \
               [f"- `{s.subject.stage}` (`{md(s.subject.impl)}`): {md(s.baseline)}" for s in failed] + [""]
    return "\n".join(out)


def write(run: MutationRun, json_path: Path | None, markdown_path: Path | None) -> list[str]:
    """Write the reports asked for (each whole or not at all); one line per report that could not be."""
    from specverify.files.cases import write_atomic

    problems = []
    for path, render in ((json_path, lambda: json.dumps(to_json(run), indent=1)), (markdown_path, lambda: markdown(run))):
        if path is None:
            continue
        try:
            write_atomic(Path(path), render().encode())
        except OSError as exc:
            problems.append(f"the report could not be written to {path}: {exc.strerror or exc}")
    return problems
