"""Checks: the questions asked of a target. A run is a list of (target, check) pairs, each one Outcome.

The first three are the input tiers (valid: byte identity; hazard: invariants and untouched bytes;
invalid: a clear refusal). Later checks (GPU properties: no host sync, launches per call, CUDA-graph
replay) register here with `register` and need no change to the harness or the session.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from specverify.backends import Target
from specverify.profiles import Profile


@dataclass
class Outcome:
    """The answer to one check of one target."""
    stage: str
    backend: str
    device: str
    check: str
    status: str = "passed"             # "passed", "failed", "error" (the suite broke) or "skipped"
    examples: int = 0                  # calls made, shrinking included
    planned: int = 0                   # examples the profile asked for
    seconds: float = 0.0
    found_after: int | None = None     # examples drawn until the first failure (before shrinking)
    headline: str = ""                 # one line: what failed, or why skipped
    report: str = ""                   # the full failure report
    kind: str = ""                     # failure kind: "wrong", "raised", "exit", "signal", "timeout", ...
    case: Path | None = None
    measures: dict = field(default_factory=dict)   # property checks: the largest value measured, by name
    coverage: Counter = field(default_factory=Counter)


@dataclass
class Context:
    """What a check needs besides its target."""
    profile: Profile
    run_seed: int
    examples: int | None               # --examples: the valid tier's count (the others scale)
    cases_dir: Path | None
    caller: object                     # calls.InProcess or worker.Isolated
    guard_check: bool                  # run twice with two guard patterns on every example
    deadline: float | None             # time.monotonic() when the target's time is up
    progress: Callable[[int], None] | None = None


@dataclass(frozen=True)
class Check:
    name: str
    doc: str                                            # one line, for listings
    applies: Callable[[Target], str | None]             # None when it applies, else why not
    run: Callable[[Target, Context], Outcome]
    planned: Callable[[Target, Profile, int | None], int] = lambda t, p, n: 0   # examples it will draw


CHECKS: dict[str, Check] = {}


def register(check: Check) -> Check:
    if check.name in CHECKS:
        raise RuntimeError(f"check {check.name!r} is registered twice")
    CHECKS[check.name] = check
    return check


def tier_check(tier: str, doc: str, applies: Callable[[Target], str | None]) -> Check:
    def run(target: Target, ctx: Context) -> Outcome:
        from specverify.search import search, verify_tier

        return search(target, tier, tier, ctx.profile.count(tier, ctx.examples), verify_tier, ctx)

    return Check(tier, doc, applies, run, lambda target, profile, examples: profile.count(tier, examples))


def _has(tier: str) -> Callable[[Target], str | None]:
    def applies(target: Target) -> str | None:
        return None if target.stage.strategy(tier) is not None else f"{target.stage.name} draws no {tier} inputs"
    return applies


def _validates(target: Target) -> str | None:
    if not target.backend.validates:
        return "outside implementations are not required to validate their arguments"
    return None


VALID = register(tier_check("valid", "byte identity with the oracle on the contract's domain", _has("valid")))
HAZARD = register(tier_check("hazard", "invariants and untouched bytes on pathological inputs", _has("hazard")))
INVALID = register(tier_check("invalid", "a clear ValueError/TypeError naming the field", _validates))
