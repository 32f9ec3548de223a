"""The `corpus` check: every case file of a stage replayed on a target before anything new is drawn.

Two folders are read, in this order: the suite's own corpus (`cases.suite_corpus()`) and the run's `--cases`
folder (a vendor's own failures from earlier runs). A case stored in both (same content id) is replayed
once. A damaged case is one note line, never an error or a failure of the target, and the other cases
still run: a file that cannot be read (`cases.load`: not a regular file, over a limit, a damaged header,
inputs or outputs that do not fit the stage's record), a case of another stage, and one whose values
break the contract (`cases.check_values`: the oracle refuses a valid- or hazard-tier case, or accepts an
invalid-tier one). Invalid-tier cases are not replayed on targets that need not validate their arguments
(outside implementations that do not declare `validates`); cases outside a target's declared domain are
counted, not replayed. A case a skip waiver names is never launched. Once the target's worker answers
out of protocol, the cases left are counted in a note, not replayed (it is asked nothing more).

Where the suite's corpus lives: in an installed wheel, `specverify/suite_cases/` (pyproject.toml ships
the checkout's `cases/` folder there as package data); run from a clone or an editable install, the
clone's `cases/` folder (found beside the package, next to `oracles/` and `kernels/`).
"""
from __future__ import annotations

import time

from specverify.files import cases
from specverify.judge.calls import error_text
from specverify.judge.failure_report import failure_report, replay_command
from specverify.judge.harness import Failure, OracleError, verify
from specverify.records import dialects
from specverify.records.backends import Target
from specverify.runs.protocol import Context, Outcome, Replay, validates


def replay(target: Target, ctx: Context) -> Outcome:
    """Replay the stage's corpus on `target` through the check's caller; one Replay per case found."""
    stage = target.stage
    outcome = Outcome(stage.name, target.backend.name, target.device, "corpus", source=target.source)
    started = time.perf_counter()
    files = cases.case_files(stage.name, ctx.cases_dir)
    outcome.planned = len(files)
    not_asked = outside = 0
    inexact: dict[str, int] = {}
    for position, (origin, path) in enumerate(files):
        if ctx.deadline is not None and time.monotonic() > ctx.deadline:
            outcome.notes.append(f"the target's time limit was spent: {len(files) - position} case(s) not replayed")
            break
        if getattr(ctx.caller, "broken", None) is not None:
            outcome.notes.append(f"its worker answered out of protocol: {len(files) - position} case(s) not replayed")
            break
        try:
            name, example = cases.load(path)
        except cases.CaseError as exc:
            outcome.notes.append(f"not replayed: {exc}")
            continue
        if name != stage.name:
            outcome.notes.append(f"not replayed: {path} holds a case of {name}, not {stage.name}")
            continue
        if example.tier == "invalid" and not validates(target):
            not_asked += 1
            continue
        if target.domain is not None and target.domain.outside(stage, example):
            outside += 1
            continue
        why = dialects.inexact(stage, example)
        if why:
            inexact[why] = inexact.get(why, 0) + 1
            continue
        try:
            cases.check_values(path, stage, example)
        except cases.CaseError as exc:
            outcome.notes.append(f"not replayed: {exc}")
            continue
        case = Replay(path.stem, path, example.tier, origin)
        outcome.replays.append(case)
        waiver = ctx.waivers.skip_case(target, case) if ctx.waivers is not None else None
        if waiver is not None:
            case.status, case.waiver = "waived", waiver.label
            continue
        outcome.examples += 1
        if ctx.progress:
            ctx.progress(outcome.examples)
        try:
            verify(stage, example, ctx.caller, target.label, ctx.guard_check)
        except Failure as exc:
            case.status, case.kind, case.headline = "failed", exc.kind, exc.headline
            case.report = failure_report(target, example, exc, replay_command(path, target))
            outcome.found_after = outcome.found_after or outcome.examples
        except (OracleError, ValueError, TypeError) as exc:  # the case, not the target
            outcome.replays.remove(case)
            outcome.notes.append(f"not replayed: {path}: {error_text(exc)}")
    if not_asked:
        outcome.notes.append(f"{not_asked} invalid-tier case(s) not replayed: outside implementations need not "
                             "validate their arguments")
    if outside:
        outcome.notes.append(f"{outside} case(s) outside the declared domain ({target.domain.summary()}): "
                             "not replayed")
    for why, count in inexact.items():
        outcome.notes.append(f"{count} case(s) outside where {dialects.words(stage, stage.dialect)} judges "
                             f"byte for byte ({why}): not replayed")
    outcome.seconds = time.perf_counter() - started
    summarize(outcome, target.label)
    return outcome


def summarize(outcome: Outcome, label: str) -> None:
    """Set the outcome's status, headline and report from its replays (again after waivers settle them)."""
    failing = [r for r in outcome.replays if r.status == "failed"]
    expected = [r for r in outcome.replays if r.status == "xfailed"]
    ran = [r for r in outcome.replays if r.status != "waived"]
    if failing:
        first = failing[0]
        outcome.status, outcome.kind, outcome.case = "failed", first.kind, first.path
        ids = ", ".join(f"{r.case_id} ({r.tier})" for r in failing)
        outcome.headline = f"{label}: {len(failing)} of {len(ran)} corpus case(s) fail: {ids}; first: {first.headline}"
        outcome.report = "\n".join(r.report for r in failing)
    elif expected:
        outcome.status, outcome.kind, outcome.case = "xfailed", expected[0].kind, expected[0].path
        outcome.headline = (f"{label}: {len(expected)} corpus case(s) fail as expected "
                            f"({', '.join(r.case_id for r in expected)})")
        outcome.report = ""
    else:
        outcome.kind, outcome.case, outcome.report = "", None, ""
        if ran:
            outcome.status, outcome.headline = "passed", f"{len(ran)} corpus case(s) replayed"
        elif outcome.replays:
            outcome.status, outcome.headline = "waived", "not launched: every corpus case is waived"
        else:
            outcome.status, outcome.headline = "skipped", "no corpus case for this stage"
