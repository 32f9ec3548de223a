"""Information draws outside a declared domain, and under the record's other rules.

For each restriction of a declared domain, a few draws of the domain without it are judged where they fall
outside it (up to DRAWS distinct ones, of at most TRIES drawn in ROUNDS
independent searches, each judging its share). They never fail a run; the report says what happens outside the
domain, and a restriction whose excluded draws all pass is flagged as not needed (like a waiver no longer
needed, without changing the exit status). An outside implementation that fails the contract under
the record's rule, and declared no dialect, is also judged on a few draws of each dialect of the record
(`other_rules`): the report says which rule its kernel may follow instead.
"""
from __future__ import annotations

import time
from dataclasses import replace

from hypothesis import Phase, given, seed as hypothesis_seed, settings

from specverify import cases, interrupts
from specverify.backends import Target
from specverify.checks import Context
from specverify.conformance import short
from specverify.domain import Domain
from specverify.harness import Failure, OracleError, verify
from specverify.profiles import seed_for

DRAWS = 10    # excluded draws judged per restriction, at most
ROUNDS = 5    # independent searches per restriction (one search's draws resemble each other)
TRIES = 120   # draws generated per restriction, at most (those inside the restriction are not judged)


def explore(target: Target, ctx: Context, draws: int = DRAWS) -> list[dict]:
    """Per restriction of the target's domain: {"restriction", "judged", "failed"} (failed: the first
    failure's headline, "" when every judged draw passed)."""
    domain: Domain | None = target.domain
    if domain is None or target.stage.valid is None:
        return []
    found = []
    for restriction in domain.restrictions:
        others = replace(domain, restrictions=tuple(r for r in domain.restrictions if r is not restriction))
        wider = replace(target, domain=others if others.restrictions else None)
        seeds = [f"outside: {restriction.short} {round}" for round in range(ROUNDS)]
        found.append({"restriction": restriction.short, **judge_draws(
            wider, ctx, seeds, TRIES, draws, admits=lambda example: bool(domain.outside(target.stage, example)),
            distinct=True)})
    return found


def judge_draws(target: Target, ctx: Context, seeds: list[str], tries: int, draws: int,
                admits=lambda example: True, distinct: bool = False) -> dict:
    """{"judged", "failed"} of `target`'s valid-tier draws judged by its record: one search per seed name,
    of tries // len(seeds) draws each, the i-th judging until (i + 1) / len(seeds) of `draws` are judged;
    only the draws `admits`, each once when `distinct` (a search draws some examples more than once).
    failed: the first failure's headline, "" when every judged draw passed."""
    from specverify.search import tier_strategy

    result, seen = {"judged": 0, "failed": ""}, set()

    def probe(example, share: int) -> None:
        if (ctx.deadline is not None and time.monotonic() > ctx.deadline) or result["failed"] \
                or result["judged"] >= share or not admits(example):
            return
        if distinct:
            key = cases.content_hash(*cases.to_meta(target.stage.name, example))
            if key in seen:
                return
            seen.add(key)
        result["judged"] += 1
        try:
            with interrupts.raising():
                verify(target.stage, example, ctx.caller, target.label, ctx.guard_check)
        except (Failure, OracleError) as exc:
            result["failed"] = short(getattr(exc, "headline", str(exc)), target.stage.name,
                                     target.backend.name, target.device)

    for i, name in enumerate(seeds):
        share = -(-draws * (i + 1) // len(seeds))
        with interrupts.deferred():
            hypothesis_seed(seed_for(ctx.run_seed, target.stage.name, name))(
                settings(ctx.profile.hypothesis_settings(tries // len(seeds)), phases=(Phase.generate,))(
                    given(tier_strategy(target, "valid"))(lambda example: probe(example, share))))()
    return result


def notes(found: list[dict]) -> list[str]:
    """One line per restriction: what its excluded draws did."""
    lines = []
    for r in found:
        where = f"outside the domain ({r['restriction']})"
        if r["failed"]:
            lines.append(f"{where}: {r['failed']}")
        elif r["judged"]:
            lines.append(f"{where}: its {r['judged']} excluded draw(s) pass: the restriction looks unneeded")
        else:
            lines.append(f"{where}: no excluded draw in {TRIES}")
    return lines


RULE_DRAWS = 40   # draws of each dialect's valid tier judged for `other_rules`


def other_rules(target: Target, ctx: Context, draws: int = RULE_DRAWS) -> list[dict]:
    """Per dialect of the target's record: {"dialect", "words", "judged", "failed"} over `draws` draws of
    that dialect's valid tier judged by its oracle (failed: the first failure's headline, "" when all pass)."""
    from specverify import dialects

    return [{"dialect": name, "words": dialects.words(target.stage, name), **judge_draws(
        replace(target, stage=dialects.judged(target.stage, name), dialect=name), ctx, [f"rule: {name}"],
        draws, draws)} for name in dialects.dialect_names(target.stage)]


def rule_notes(found: list[dict]) -> list[str]:
    """One line per dialect the failing kernel was judged by."""
    lines = []
    for r in found:
        if r["failed"]:
            lines.append(f"under {r['words']} instead: {r['failed']}")
        elif r["judged"]:
            lines.append(f"under {r['words']} instead: its {r['judged']} draws pass: the kernel may follow that "
                         f"rule (declare dialect = \"{r['dialect']}\")")
    return lines
