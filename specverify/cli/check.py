"""`specverify check`: search for inputs where an implementation differs from the oracle.

Exit status: 0 everything checked passed (failures every one covered by an expect-fail waiver included);
1 a failure no waiver covers, a waiver no longer needed, or a run ended early by SIGINT or SIGTERM (its
reports hold what finished); 2 bad usage; 3 nothing was checked (every target skipped, or a worker could not be
set up); 4 incomplete (every check that ran passed, some target's time ran out).
"""
from __future__ import annotations

import time

from specverify import interrupts, usage
from specverify.cli import selection
from specverify.cli.output import ProgressListener, console, progress_bar, say
from specverify.judge import sandbox
from specverify.pages import report_files
from specverify.pages.terminal import EXAMPLES_NOTE, coverage_tables, run_lines, summary_table, totals_line
from specverify.records.registry import all_stages
from specverify.runs import session
from specverify.runs.protocol import Outcome
from specverify.runs.verdicts import Run
from specverify.usage import FAILED, NOTHING_CHECKED


def run(args) -> int:
    started = time.monotonic()
    outcomes: list[Outcome] = []
    chosen = interrupted = None
    try:
        chosen = selection.select(args)
        say(header(chosen, args))
        for note in chosen.notes:
            say(note)
        outcomes += chosen.skipped
        total = session.planned(chosen.targets, chosen.plan)
        with progress_bar() as progress:
            outcomes += run_targets(chosen, args, ProgressListener(progress, total))
    except interrupts.Interrupted as stop:
        interrupts.caught()
        outcomes += stop.outcomes
        interrupted = stop.why
    with interrupts.deferred():
        interrupts.caught()             # a signal from here on is read below
        finished = chosen.finished(outcomes, interrupted) if chosen else nothing_ran(args, interrupted)
        print_run(finished, args, chosen, time.monotonic() - started)
        problems = report_files.write(finished, args.json, args.junit, args.markdown)
        late = interrupts.pending()
        if late and not finished.interrupted:     # the signal came while the run was being reported
            finished.interrupted, finished.exit_status = late, FAILED
            problems = report_files.write(finished, args.json, args.junit, args.markdown)
            say(interrupted_line(finished, time.monotonic() - started))
    for line in problems:
        say(f"specverify check: error: {line}")
    return finished.exit_status if finished.exit_status == FAILED or not problems else usage.USAGE


def header(chosen: selection.Selection, args) -> str:
    plan = chosen.plan
    mode = ("isolated" if plan.isolated or chosen.judges_outside else "in process") + spread(args, chosen)
    lines = []
    if chosen.vendor is not None:
        v = chosen.vendor
        lines.append(f"vendor {v.name}: {v.declaration}{f' ({v.distribution})' if v.distribution else ''}: "
                     f"{len(v.implementations)} stage(s) implemented")
    lines.append(f"specverify check: profile {plan.profile.name}, seed {plan.run_seed}, {len(chosen.targets)} "
                 f"target(s), {session.planned(chosen.targets, plan)} check(s), {mode}, findings to {plan.findings}/")
    if (plan.isolated or chosen.judges_outside) and any(t.device == "cpu" for t in chosen.targets):
        lines.append("  " + sandbox.worker_memory(plan.memory, "--memory" if args.memory else "the profile")[1])
    return "\n".join(lines)


def spread(args, chosen: selection.Selection) -> str:
    """How the run is spread, for its first line; bad --devices or --ray values are usage errors here."""
    if args.devices and args.ray:
        raise usage.UsageError("--devices and --ray exclude each other")
    if args.ray:
        return f", Ray ({args.ray})"
    from specverify.runs import shard

    try:
        lanes = shard.spread(args.devices, chosen.targets, chosen.plan)
    except shard.DevicesError as exc:
        raise usage.UsageError(str(exc)) from None
    return f", {len(lanes)} worker(s): {', '.join(lane.name for lane in lanes)}" if lanes else ""


def run_targets(chosen: selection.Selection, args, listener) -> list[Outcome]:
    """Over Ray (--ray), or over local workers (--devices; by default one per core where every target runs on
    the CPU) or in this process (`shard.run`)."""
    try:
        if args.ray:
            from specverify.runs import cluster

            return cluster.run(chosen.targets, chosen.plan, args.ray, listener)
        from specverify.runs import shard

        return shard.run(chosen.targets, chosen.plan, args.devices, listener)
    except session.ImplementationNotFound as exc:
        raise usage.UsageError(f"--impl {exc}") from None
    except ValueError as exc:     # shard.DevicesError, cluster.RayError: --devices or --ray
        if type(exc).__name__ not in ("DevicesError", "RayError"):
            raise
        raise usage.UsageError(str(exc)) from None


def nothing_ran(args, interrupted: str | None) -> Run:
    """The run of a signal that came before any target was chosen."""
    return Run([], args.profile, args.seed or 0, args.device or "cpu", exit_status=FAILED, interrupted=interrupted)


def interrupted_line(run: Run, seconds: float) -> str:
    return (f"specverify check: interrupted by {run.interrupted} after {seconds:.1f} s: "
            f"{totals_line(run.outcomes, seconds).split(': ', 1)[1] if run.outcomes else 'no check finished'}; "
            f"the reports hold what finished")


def print_run(run: Run, args, chosen: selection.Selection | None, seconds: float) -> None:
    """The table, the totals, every failure's report, notes and verdicts; an interrupted run: one line."""
    if run.interrupted:
        say(interrupted_line(run, seconds))
        return
    console.print(summary_table(run.outcomes))
    say(totals_line(run.outcomes, seconds))
    say(EXAMPLES_NOTE)
    for o in run.outcomes:
        if o.status in ("failed", "error"):
            say(o.report or o.headline)
    for line in run_lines(run, bool(chosen and chosen.judges_outside)):
        say(line)
    if args.coverage:
        for table in coverage_tables(run.outcomes, all_stages()):
            console.print(table)
    if run.exit_status == NOTHING_CHECKED:
        say("specverify check: nothing was checked: every target was skipped")
