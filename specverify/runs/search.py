"""A Hypothesis search of one input tier for an example on which a target breaks its contract.

A target's declared domain (`specverify.records.domain`) is a parameter of what is drawn (`tier_strategy`), never
a filter. The first failure is shrunk, written as a case file into the run's findings folder (`Context.findings_dir`,
never the suite's corpus) and reported with its replay command. A target whose time is up stops the
search (`Abandon` passes through Hypothesis): the smallest failure seen is kept, and a search that found
none is "incomplete" (N of the planned examples, all passed), never a failure. A failure that does not
repeat on the same input is reported for what it was: a worker that died or ran out of time, then passed
on that input in a fresh worker, is that crash (with what the worker printed), not "nondeterministic",
which is kept for an implementation whose answers differ between calls.
"""
from __future__ import annotations

import time
import traceback
from collections import Counter
from dataclasses import replace
from typing import Callable

from hypothesis import errors as hypothesis_errors
from hypothesis import given
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from specverify import env, interrupts
from specverify.files import cases
from specverify.judge import stage_memo
from specverify.judge.calls import error_text
from specverify.judge.failure_report import failure_report, replay_command
from specverify.judge.harness import Failure, OracleError, spent, verify
from specverify.records.backends import Target
from specverify.records.stage import DrawContext, Example
from specverify.runs.profiles import seed_for
from specverify.runs.protocol import Context, Outcome
from specverify.runs.reach import Tally, tier_draws
from specverify.strategies.blocks import asked_rules, coverage, rule_asked, rules_offered


class Abandon(BaseException):
    """Stop searching (not an Exception, so Hypothesis lets it through): the target's time is up, or a
    crash has been shrunk as far as its budget allows."""


# Calls allowed for shrinking after the first failure of a kind that costs a worker (or a time limit). A
# worker that answered out of protocol is asked nothing more (`worker.Isolated.broken`): its example is kept.
SHRINK_BUDGET = {"exit": 40, "signal": 40, "lost": 0, "timeout": 4}
CRASHES = {"exit": "a crash", "signal": "a crash", "timeout": "a time-out"}   # failures that end a worker


def draw_context(target: Target) -> DrawContext:
    return DrawContext(small=target.slow, domain=target.domain)


def tier_strategy(target: Target, tier: str):
    """What a tier draws: the stage's own strategy; for the invalid tier, its hand-written value rules
    and the rules generated from its record. Within the target's declared domain: its bounds through the
    context, its layouts, dtypes and optional inputs by projecting every draw onto them."""
    drawn = tier_draws(target.stage, tier, draw_context(target))
    return drawn if target.domain is None else projected(drawn, target.domain)


@st.composite
def projected(draw, drawn, domain):
    """`drawn` projected onto `domain` (a composite, not `.map`: a map re-draws after a failed `assume`,
    and a strategy's `aim` may be called once per example only)."""
    return domain.project(draw(drawn))


def verify_tier(target: Target, example: Example, ctx: Context) -> dict:
    """The judge of the tier checks (the harness's verdict on one example)."""
    verify(target.stage, example, ctx.caller, target.label, ctx.guard_check)
    return {}


Judge = Callable[[Target, Example, Context], dict]


def search(target: Target, check: str, tier: str, planned: int, judge: Judge, ctx: Context,
           rule: str | None = None, offered: set[str] | None = None) -> Outcome:
    """Draw up to `planned` examples of `tier` and hand each to `judge` (which raises Failure, or returns
    what it measured: the outcome keeps the largest value of each measure). Within a stage's scope, the
    draws of an earlier target's passing search with the same strategy, seed and budget are handed over
    again without Hypothesis (`stage_memo`); if one fails, the search runs with Hypothesis. A passing search of
    the invalid tier then asks each value rule its draws offered but never asked (`swept`); `rule`: the one
    value rule such a search asks, `offered`: where it adds the rules its draws offer."""
    stage = target.stage
    outcome = Outcome(stage.name, target.backend.name, target.device, check, planned=planned)
    started = time.perf_counter()
    failing: list[tuple[Example, BaseException]] = []
    tally = Tally()
    timing: Counter = Counter()
    offered = set() if offered is None else offered
    token, clocks = coverage.set(tally.labels), spent.set(timing)
    rules = rules_offered.set(offered), rule_asked.set(rule)
    seed = seed_for(ctx.run_seed, stage.name, (tier if check == tier else f"{tier}:{check}") + (f" {rule}" if rule else ""))
    memo, key = shared_draws(target, check, tier, seed, planned, ctx)
    drawn: list[Example] = []

    def probe(example: Example) -> None:
        if ctx.deadline is not None and time.monotonic() > ctx.deadline:
            raise Abandon()
        if failing and outcome.examples - outcome.found_after >= SHRINK_BUDGET.get(getattr(failing[0][1], "kind", ""), 10**9):
            raise Abandon()
        drawn.append(example)
        outcome.examples += 1
        if ctx.progress:
            ctx.progress(min(outcome.examples, outcome.planned))
        # also with the second guard pattern (a read outside an input): one example in `every`, and each one
        # once a failure is being shrunk (so the shrunk case fails as the first did)
        every = ctx.profile.guard_every
        guarded = not ctx.guard_check and every and (failing or (outcome.examples - 1) % every == 0)
        try:
            with interrupts.raising():
                measured = judge(target, example, replace(ctx, guard_check=True) if guarded else ctx)
        except (Failure, OracleError) as exc:
            if outcome.found_after is None:
                outcome.found_after = outcome.examples
            failing.append((example, exc))
            raise
        finally:
            tally.close()
        for key, value in measured.items():
            outcome.measures[key] = max(value, outcome.measures.get(key, value))

    earlier = memo.draws.get(key) if key is not None else None
    try:
        if earlier is not None and replayed(earlier.examples, probe, outcome, failing):
            tally.counts.update(earlier.coverage)
            offered.update(earlier.offered)
        else:
            drawn.clear()
            test = hypothesis_seed(seed)(ctx.profile.hypothesis_settings(outcome.planned)(
                given(tally.drawing(tier_strategy(target, tier)))(probe)))
            with interrupts.deferred():    # a signal inside Hypothesis's engine waits for the next example
                test()
            if key is not None and not failing:
                memo.keep_draws(key, drawn, tally.counts, offered)
    except Abandon:
        if failing:
            record_failure(target, check, ctx, outcome, *failing[-1])
        else:
            outcome.status, outcome.kind = "incomplete", "timeout"
            outcome.headline = (f"{target.label}: incomplete: the target's time limit was spent after "
                                f"{outcome.examples} of {outcome.planned} example(s) of the {check} check, all passed")
            outcome.report = outcome.headline
    except hypothesis_errors.Unsatisfiable:
        if rule is None:
            raise
        outcome.notes.append(f"value rule {rule!r}: no draw offered it again")
    except (Failure, OracleError, hypothesis_errors.Flaky) as exc:
        if not failing:
            raise
        example, first = failing[-1]       # Hypothesis re-runs the shrunk example last
        if isinstance(exc, hypothesis_errors.Flaky):
            exc = not_repeated(target, ctx, first)
        record_failure(target, check, ctx, outcome, example, exc)
    except Exception as exc:  # a strategy, the oracle's inputs or the harness broke, not the target
        outcome.status = "error"
        outcome.headline = f"the search for {target.label} ({check} check) broke: {error_text(exc)}"
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
        outcome.report = outcome.headline + "\n" + "".join(frames[-4:])
    finally:
        coverage.reset(token)
        spent.reset(clocks)
        rules_offered.reset(rules[0])
        rule_asked.reset(rules[1])
    outcome.coverage = tally.counts
    outcome.seconds = time.perf_counter() - started
    outcome.timing = {phase: round(timing[phase], 4) for phase in ("oracle", "call", "judge", "guard")}
    outcome.timing["other"] = round(max(0.0, outcome.seconds - sum(timing.values())), 4)   # drawing, shrinking
    if tier == "invalid" and rule is None and outcome.status == "passed":
        swept(target, check, judge, ctx, outcome, offered)
    return outcome


def swept(target: Target, check: str, judge: Judge, ctx: Context, outcome: Outcome, offered: set[str]) -> None:
    """Each value rule of the invalid tier that the search's draws (or the sweep's) offered but never asked,
    asked in one example of its own (in name order, each with its own seed; a failure ends the sweep): the ci
    budget asks every rule however the draws fell. The outcome takes the sweep's examples and its first
    failure."""
    asked = asked_rules(outcome.coverage)
    quiet = replace(ctx, progress=None)
    while offered - asked:
        rule = min(offered - asked)
        asked.add(rule)
        more = search(target, check, "invalid", 1, judge, quiet, rule=rule, offered=offered)
        before, outcome.examples = outcome.examples, outcome.examples + more.examples
        outcome.coverage.update(more.coverage)
        outcome.notes += more.notes
        outcome.seconds += more.seconds
        for phase, seconds in more.timing.items():
            outcome.timing[phase] = round(outcome.timing.get(phase, 0.0) + seconds, 4)
        if more.status != "passed":
            for name in ("status", "kind", "headline", "report", "case", "failing"):
                setattr(outcome, name, getattr(more, name))
            outcome.found_after = None if more.found_after is None else before + more.found_after
            return


def not_repeated(target: Target, ctx: Context, first: BaseException) -> Failure:
    """The failure to report when `first` did not repeat on the same input (Hypothesis's Flaky): a crash or
    a time-out that did not repeat is reported as such, with what the worker printed; any other failure
    that did not repeat makes the target nondeterministic."""
    kind = getattr(first, "kind", "")
    if isinstance(first, Failure) and kind in CRASHES:
        again = "in a fresh worker" if getattr(ctx.caller, "isolated", False) else "when called again"
        return Failure(f"{first.headline} on this input, then passed on it {again}: {CRASHES[kind]} that does "
                       f"not repeat", first.detail, kind)
    return Failure(f"{target.label} is nondeterministic: it failed on an input, then passed on it "
                   f"({getattr(first, 'headline', first)})", getattr(first, "detail", ""))


def shared_draws(target: Target, check: str, tier: str, seed: int, planned: int, ctx: Context):
    """(the stage's memo, the key of this search's draws in it), or (None, None) where draws are not shared:
    no scope, a declared domain, or a profile whose draws depend on more than the seed (an example database,
    randomized phases). The key names the tier's strategy, not the dialect: a dialect that keeps the
    record's draws (no valid or hazard strategy of its own) shares them, its seed being the stage's."""
    memo = stage_memo.current.get()
    if memo is None or target.domain is not None or ctx.profile.database or ctx.profile.randomized:
        return None, None
    return memo, (target.stage.name, target.stage.strategy(tier), tier, check, seed, planned, target.slow)


def replayed(examples: list[Example], probe, outcome: Outcome, failing: list) -> bool:
    """Hand `examples` to `probe` in order: True when every one passed; else the outcome is as before the
    first (the search then runs with Hypothesis, which finds and shrinks the failure itself)."""
    try:
        for example in examples:
            probe(example)
        return True
    except Exception:  # a failure, or anything else the search will meet again and report
        outcome.examples, outcome.found_after, outcome.measures = 0, None, {}
        failing.clear()
        return False


def record_failure(target: Target, check: str, ctx: Context, outcome: Outcome, example: Example,
                   exc: BaseException) -> None:
    """Save the failing example as a case (when it can be) and fill in the outcome's report."""
    outcome.status = "failed" if isinstance(exc, Failure) else "error"
    outcome.kind = getattr(exc, "kind", "oracle")
    outcome.failing = example
    outcome.headline = getattr(exc, "headline", str(exc))
    notes = []
    if ctx.findings_dir is not None:
        record = {"backend": target.backend.name, "device": target.device, "source": target.source,
                  "dialect": target.dialect,
                  "seed": ctx.run_seed, "profile": ctx.profile.name, "check": check, "tier": example.tier,
                  "versions": env.versions(),
                  "failure": outcome.headline}
        try:
            outcome.case = cases.save(ctx.findings_dir, target.stage.name, example, record)
        except (OSError, cases.CaseError) as problem:
            notes.append(f"the case could not be written: {error_text(problem)}")
    command = replay_command(outcome.case, target) if outcome.case else None
    outcome.report = failure_report(target, example, exc, command, notes)
