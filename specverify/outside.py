"""Information draws outside a declared domain: for each restriction, a few draws of the domain without it
are judged where they fall outside it (up to DRAWS distinct ones, of at most TRIES drawn in ROUNDS
independent searches, each judging its share). They never fail a run; the report says what happens outside the
domain, and a restriction whose excluded draws all pass is flagged as not needed (like a waiver no longer
needed, without changing the exit status).
"""
from __future__ import annotations

import time
from dataclasses import replace

from hypothesis import Phase, given, seed as hypothesis_seed, settings

from specverify import cases
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
    from specverify.search import tier_strategy

    domain: Domain | None = target.domain
    if domain is None or target.stage.valid is None:
        return []
    found = []
    for restriction in domain.restrictions:
        others = replace(domain, restrictions=tuple(r for r in domain.restrictions if r is not restriction))
        wider = replace(target, domain=others if others.restrictions else None)
        result = {"restriction": restriction.short, "judged": 0, "failed": ""}
        seen: set[str] = set()

        def probe(example, share: int) -> None:
            if (ctx.deadline is not None and time.monotonic() > ctx.deadline) or result["failed"] \
                    or result["judged"] >= share or not domain.outside(target.stage, example):
                return
            key = cases.content_hash(*cases.to_meta(target.stage.name, example))
            if key in seen:       # the search draws some examples more than once: judge each once
                return
            seen.add(key)
            result["judged"] += 1
            try:
                verify(target.stage, example, ctx.caller, target.label, ctx.guard_check)
            except (Failure, OracleError) as exc:
                result["failed"] = short(getattr(exc, "headline", str(exc)), target.stage.name,
                                         target.backend.name, target.device)

        for round in range(ROUNDS):
            share = -(-draws * (round + 1) // ROUNDS)
            test = hypothesis_seed(seed_for(ctx.run_seed, target.stage.name, f"outside: {restriction.short} {round}"))(
                settings(ctx.profile.hypothesis_settings(TRIES // ROUNDS), phases=(Phase.generate,))(
                    given(tier_strategy(wider, "valid"))(lambda example: probe(example, share))))
            test()
        found.append(result)
    return found


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
