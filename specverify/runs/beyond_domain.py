"""Information draws outside a declared domain, and under the record's other rules.

For each restriction of a declared domain, draws of the domain without it are judged where they fall outside
it: up to as many distinct ones as the valid tier's examples (the profile's count, `wanted`), of at most
TRIES_PER_DRAW times that many drawn in ROUNDS independent searches; the first failure ends them. They never
fail a run. A restriction is called not needed only when `wanted` excluded draws were judged, and passed, by
every check it can matter to: byte identity always; for `given = true` on a host hint (`Stage.hints`, which
a kernel may size its launch by instead of reading the device), the `no-sync` check too, where it applies
(elsewhere the restriction is "not judged": the check that decides it is not asked of this target).

Time: the valid check leaves these draws a share of the target's time (`reserving`: INFO_SHARE of what is
left when the check starts), split evenly between the restrictions (and the dialects, below); a restriction
whose share is spent before its first draw says "not run: no time left", never that it found no draw.

An outside implementation that fails the contract under the record's rule, and declared no dialect, is also
judged under each dialect of the record (`other_rules`): first its shrunk failing case, replayed under that
dialect's oracle, then RULE_DRAWS draws of the dialect's valid tier. A dialect is offered ("it may follow
that rule") only where the failing case itself and every draw pass under it.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator

from hypothesis import Phase, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings

from specverify import interrupts
from specverify.files import cases
from specverify.judge.harness import Failure, OracleError, verify
from specverify.records.backends import Target
from specverify.records.domain import Domain, Restriction
from specverify.records.stage import Example
from specverify.runs.profiles import seed_for
from specverify.runs.properties import NO_SYNC, PROPERTY_JUDGES, fresh_caller
from specverify.runs.protocol import Context, short
from specverify.runs.search import tier_strategy

ROUNDS = 5            # independent searches per restriction (one search's draws resemble each other)
TRIES_PER_DRAW = 6    # draws generated per excluded draw wanted (those inside the restriction are not judged)
INFO_SHARE = 0.2      # of the target's time left when the valid check starts, kept for these draws
RULE_DRAWS = 40       # draws of each dialect's valid tier judged for `other_rules`

Judge = Callable[[Example], None]   # raises Failure (or OracleError) when the example fails


def reserving(ctx: Context) -> Context:
    """`ctx` for the valid search of a target with information draws: its deadline brought forward by
    INFO_SHARE of the time left, which the draws keep (no deadline: unchanged)."""
    if ctx.deadline is None:
        return ctx
    left = max(0.0, ctx.deadline - time.monotonic())
    return replace(ctx, deadline=ctx.deadline - INFO_SHARE * left)


def share(ctx: Context, parts: int) -> float | None:
    """The deadline of the next of `parts` equal shares of the time `ctx` has left (None: no deadline)."""
    if ctx.deadline is None:
        return None
    now = time.monotonic()
    return now + max(0.0, ctx.deadline - now) / max(1, parts)


def checks_it_matters_to(target: Target, restriction: Restriction) -> tuple[list[str], str]:
    """(the property checks besides byte identity that decide whether `restriction` is needed, why it
    cannot be judged here: "" when it can)."""
    if restriction.kind == "given" and restriction.value and restriction.subject in target.stage.hints:
        why = NO_SYNC.applies(target)
        if why:
            return [], (f"`{restriction.subject}` is a host hint: it matters to the no-sync check, which is not "
                        f"asked here ({why})")
        return ["no-sync"], ""
    return [], ""


def explore(target: Target, ctx: Context, later: int = 0) -> list[dict]:
    """Per restriction of the target's domain: {"restriction", "wanted", "judged", "failed", "checks",
    "stopped", "unjudged"} (failed: the first failure's headline, "" when every judged draw passed; stopped:
    "time" when the restriction's share of time ran out first; unjudged: why it cannot be called not
    needed here). `later`: how many more shares of the time other information draws will take."""
    domain: Domain | None = target.domain
    if domain is None or target.stage.valid is None:
        return []
    wanted = ctx.profile.count("valid", ctx.examples)
    found = []
    for i, restriction in enumerate(domain.restrictions):
        others = replace(domain, restrictions=tuple(r for r in domain.restrictions if r is not restriction))
        wider = replace(target, domain=others if others.restrictions else None)
        checks, unjudged = checks_it_matters_to(target, restriction)
        deadline = share(ctx, len(domain.restrictions) - i + later)
        seeds = [f"outside: {restriction.short} {round}" for round in range(ROUNDS)]
        entry = {"restriction": restriction.short, "wanted": wanted, "tries": TRIES_PER_DRAW * wanted,
                 "checks": ["valid", *checks], "unjudged": unjudged}
        with judged_by(wider, ctx, checks) as judge:
            entry.update(judge_draws(wider, ctx, seeds, entry["tries"], wanted, judge, deadline,
                                     admits=lambda example: bool(domain.outside(target.stage, example)),
                                     distinct=True))
        found.append(entry)
    return found


@contextmanager
def judged_by(target: Target, ctx: Context, checks: list[str]) -> Iterator[Judge]:
    """The judge of an information draw: byte identity, then each named property check (in a fresh worker,
    as the property checks run; closed on leaving)."""

    def verified(example: Example) -> None:
        verify(target.stage, example, ctx.caller, target.label, ctx.guard_check)

    if not checks:
        yield verified
        return
    with fresh_caller(ctx) as fresh:
        def judge(example: Example) -> None:
            verified(example)
            for name in checks:
                PROPERTY_JUDGES[name](target, example, fresh)
        yield judge


class Stop(BaseException):
    """Ends one search of information draws (not an Exception: Hypothesis lets it through): its quota is
    judged, a draw failed, or ("time") its share of time is spent."""


def judge_draws(target: Target, ctx: Context, seeds: list[str], tries: int, draws: int, judge: Judge,
                deadline: float | None, admits=lambda example: True, distinct: bool = False) -> dict:
    """{"judged", "failed", "stopped"} of `target`'s valid-tier draws given to `judge`: one search per seed
    name, of tries // len(seeds) draws each, the i-th judging until (i + 1) / len(seeds) of `draws` are
    judged; only the draws `admits`, each once when `distinct` (a search draws some examples more than
    once); none after the first failure or past `deadline`. failed: the first failure's headline ("" when
    every judged draw passed); stopped: "time" when the deadline ended the draws before `draws` were judged."""
    result, seen = {"judged": 0, "failed": "", "stopped": ""}, set()

    def probe(example, quota: int) -> None:
        if result["failed"] or result["judged"] >= quota:
            raise Stop()
        if deadline is not None and time.monotonic() > deadline:
            raise Stop("time")
        if not admits(example):
            return
        if distinct:
            key = cases.content_hash(*cases.to_meta(target.stage.name, example))
            if key in seen:
                return
            seen.add(key)
        result["judged"] += 1
        try:
            with interrupts.raising():
                judge(example)
        except (Failure, OracleError) as exc:
            result["failed"] = short(getattr(exc, "headline", str(exc)), target.stage.name,
                                     target.backend.name, target.device)

    for i, name in enumerate(seeds):
        if result["failed"] or result["stopped"]:
            break
        quota = -(-draws * (i + 1) // len(seeds))
        try:
            with interrupts.deferred():
                hypothesis_seed(seed_for(ctx.run_seed, target.stage.name, name))(
                    settings(ctx.profile.hypothesis_settings(max(1, tries // len(seeds))),
                             phases=(Phase.generate,))(
                        given(tier_strategy(target, "valid"))(lambda example: probe(example, quota))))()
        except Stop as stop:
            result["stopped"] = "".join(stop.args)
    return result


def unneeded(entry: dict) -> bool:
    """Whether a restriction's information draws show it is not needed: `wanted` excluded draws judged by
    every check it matters to, each passed."""
    return (not entry["failed"] and not entry.get("unjudged") and not entry.get("stopped")
            and entry["judged"] >= entry.get("wanted", 1) > 0)


def notes(found: list[dict]) -> list[str]:
    """One line per restriction: what its excluded draws did."""
    lines = []
    for r in found:
        where = f"outside the domain ({r['restriction']})"
        checked = " and ".join(r.get("checks") or ["valid"])
        wanted = r.get("wanted", r["judged"])
        if r["failed"]:
            lines.append(f"{where}: {r['failed']}")
        elif r.get("stopped") == "time" and not r["judged"]:
            lines.append(f"{where}: not run: no time left")
        elif r.get("unjudged"):
            passed = f"its {r['judged']} excluded draw(s) pass on bytes, but " if r["judged"] else ""
            lines.append(f"{where}: {passed}it could not be judged: {r['unjudged']}")
        elif unneeded(r):
            lines.append(f"{where}: its {r['judged']} excluded draws pass ({checked}): the restriction is not needed")
        elif r.get("stopped") == "time":
            lines.append(f"{where}: {r['judged']} of {wanted} excluded draws judged ({checked}), each passed, "
                         f"before its share of time ran out: too few to say the restriction is not needed")
        elif r["judged"]:
            lines.append(f"{where}: only {r['judged']} excluded draw(s) in {r.get('tries', '?')} draws, each passed "
                         f"({checked}): too few to say the restriction is not needed")
        else:
            lines.append(f"{where}: no excluded draw in {r.get('tries', '?')} draws")
    return lines


def other_rules(target: Target, ctx: Context, failing: Example | None, draws: int = RULE_DRAWS) -> list[dict]:
    """Per dialect of the target's record: {"dialect", "words", "case", "judged", "failed", "stopped"}.
    case: what the shrunk `failing` example does under the dialect's oracle ("passes", "fails: ...", or
    "not judged: ..." where the dialect cannot judge it byte for byte, or no case was kept); then, where
    it passes, `draws` draws of that dialect's valid tier judged by its oracle (failed: the first
    failure's headline)."""
    from specverify.records import dialects

    names = dialects.dialect_names(target.stage)
    found = []
    for i, name in enumerate(names):
        under = replace(target, stage=dialects.judged(target.stage, name), dialect=name)
        entry = {"dialect": name, "words": dialects.words(target.stage, name), "judged": 0, "failed": "",
                 "stopped": ""}
        entry["case"] = replayed(under, ctx, failing)
        if entry["case"] == "passes":
            judge = lambda example, under=under: verify(under.stage, example, ctx.caller, under.label,  # noqa: E731
                                                       ctx.guard_check)
            entry.update(judge_draws(under, ctx, [f"rule: {name}"], draws, draws, judge, share(ctx, len(names) - i)))
        found.append(entry)
    return found


def replayed(under: Target, ctx: Context, failing: Example | None) -> str:
    """What the failing case does under the dialect `under` is judged by."""
    from specverify.records import dialects

    if failing is None:
        return "not judged: no failing case was kept"
    why = dialects.inexact(under.stage, failing)
    if why:
        return f"not judged: the dialect does not judge this case byte for byte ({why})"
    if ctx.deadline is not None and time.monotonic() > ctx.deadline:
        return "not judged: no time left"
    try:
        verify(under.stage, failing, ctx.caller, under.label, ctx.guard_check)
    except (Failure, OracleError) as exc:
        return "fails: " + short(getattr(exc, "headline", str(exc)), under.stage.name, under.backend.name,
                                 under.device)
    return "passes"


def follows(entry: dict) -> bool:
    """Whether a dialect is offered: the failing case and every judged draw pass under it."""
    return entry.get("case", "passes") == "passes" and entry["judged"] > 0 and not entry["failed"] \
        and not entry.get("stopped")


def rule_notes(found: list[dict]) -> list[str]:
    """One line per dialect the failing kernel was judged by."""
    lines = []
    for r in found:
        where = f"under {r['words']} instead"
        case = r.get("case", "passes")
        if case.startswith("fails: "):
            lines.append(f"{where}: the failing case fails too ({case.removeprefix('fails: ')}): not that rule")
        elif case != "passes":
            lines.append(f"{where}: the failing case was {case}")
        elif r["failed"]:
            lines.append(f"{where}: the failing case passes, but a draw fails: {r['failed']}")
        elif follows(r):
            lines.append(f"{where}: the failing case and {r['judged']} draws pass: the kernel may follow that "
                         f"rule (declare dialect = \"{r['dialect']}\")")
        elif r.get("stopped") == "time" and not r["judged"]:
            lines.append(f"{where}: the failing case passes; its draws were not run: no time left")
        else:
            lines.append(f"{where}: the failing case passes; {r['judged']} draw(s) passed before the time ran out")
    return lines
