"""Checks: the questions asked of a target. A run is a list of (target, check) pairs, each one Outcome.

`corpus` replays the regression corpus (the suite's and the vendor's case files); `valid`, `hazard` and
`invalid` search the three input tiers (byte identity; invariants and untouched bytes; a clear refusal);
`wide-offsets` asks the valid tier again with strided fields spread past 2**31 elements (CUDA).
Checks run in ascending `order`, so a known failure from the corpus shows before any new draw. The GPU
property checks (no host sync, launches per call, CUDA-graph replay, stream order, cross-device) come
from `specverify.runs.properties`; a new check is one more entry of `CHECKS`, with no change to the
harness or the session.
"""
from __future__ import annotations

from typing import Callable

from specverify.records.backends import Target
from specverify.runs import beyond_domain
from specverify.runs.corpus_check import replay
from specverify.runs.distribution import DISTRIBUTION
from specverify.runs.independence import INDEPENDENT
from specverify.runs.properties import PROPERTY_CHECKS
from specverify.runs.protocol import Check, Context, Outcome, validates
from specverify.runs.search import search, verify_tier
from specverify.runs.wide_offsets import WIDE_OFFSETS


def tier_check(tier: str, doc: str, order: int, applies: Callable[[Target], str | None]) -> Check:
    def run(target: Target, ctx: Context) -> Outcome:
        """The tier's search; after the valid tier's, the information draws (`specverify.runs.beyond_domain`), which
        keep a share of the target's time: outside each declared restriction, and under each dialect of
        the record where an outside implementation that declared none fails."""
        restricted = tier == "valid" and target.domain is not None and bool(target.domain.restrictions)
        rules = tier == "valid" and not target.backend.trusted and not target.dialect and bool(target.stage.dialects)
        searched = beyond_domain.reserving(ctx) if restricted or rules else ctx
        outcome = search(target, tier, tier, ctx.profile.count(tier, ctx.examples), verify_tier, searched)
        failing, outcome.failing = outcome.failing, None
        if target.interpreted and tier == "valid":
            outcome.notes.append(f"drawn at the Triton interpreter's sizes, as our Triton kernels on the CPU are: "
                                 f"{target.interpreted}")
        rules = rules and outcome.status == "failed"
        if restricted:
            outcome.outside = beyond_domain.explore(target, ctx, later=int(rules))
            outcome.notes += beyond_domain.notes(outcome.outside)
        if rules:
            outcome.rules = beyond_domain.other_rules(target, ctx, failing)
            outcome.notes += beyond_domain.rule_notes(outcome.rules)
        return outcome

    return Check(tier, doc, order, applies, run, lambda target, profile, examples: profile.count(tier, examples))


def _has(tier: str) -> Callable[[Target], str | None]:
    def applies(target: Target) -> str | None:
        return None if target.stage.strategy(tier) is not None else f"the stage has no {tier} tier"
    return applies


def _validates(target: Target) -> str | None:
    if not validates(target):
        return "outside implementations need not validate their arguments (unless they declare `validates`)"
    return None


CORPUS = (Check("corpus", "every case file of the stage in the corpus (ours and --cases) replayed first",
                        0, lambda target: None, replay,
                        by_default=lambda target: not target.backend.trusted))
VALID = tier_check("valid", "byte identity with the oracle on the contract's domain", 10, _has("valid"))
HAZARD = tier_check("hazard", "invariants and untouched bytes on pathological inputs", 20, _has("hazard"))
INVALID = tier_check("invalid", "a clear ValueError/TypeError naming the field", 30, _validates)

CHECKS: dict[str, Check] = {check.name: check for check in (CORPUS, VALID, DISTRIBUTION, HAZARD, INDEPENDENT,
                                                              INVALID, WIDE_OFFSETS, *PROPERTY_CHECKS)}


def ordered(names=None) -> list[Check]:
    """The named checks (all when None), in running order."""
    chosen = [CHECKS[n] for n in names] if names is not None else list(CHECKS.values())
    return sorted(chosen, key=lambda c: (c.order, c.name))


def default_checks(target: Target) -> list[Check]:
    """The checks a target gets when none are named: those that apply and are asked by default."""
    return [c for c in ordered() if c.applies(target) is None and c.by_default(target)]
