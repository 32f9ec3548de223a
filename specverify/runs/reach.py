"""What a stage's draws reach at a budget, against the floors its record names (`Stage.floors`).

A search labels every class an example belongs to (`strategies.blocks.label`). Here the same strategy is drawn
with the same Hypothesis seed and settings as a check of that tier, and nothing is judged: a passing target's
search draws exactly these examples, so the counts are those of the check (of its first, unshrunk pass).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import given
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from specverify.records.stage import DrawContext, Floor, Stage
from specverify.runs.profiles import PROFILES, Profile, seed_for
from specverify.strategies.blocks import coverage
from specverify.strategies.generic import invalid_tier

FLOOR_SEEDS = (0, 1, 2, 3)     # the run seeds every floor must hold on, at the ci budget


def tier_draws(stage: Stage, tier: str, ctx: DrawContext):
    """The strategy of a tier: the stage's own, or for the invalid tier its value rules and generated rules."""
    return invalid_tier(stage, ctx) if tier == "invalid" else stage.strategy(tier)(ctx)


class Tally:
    """The classes of a search's examples, each counted once per example (`counts`): a draw's labels gather in
    `labels` (the `coverage` variable's counter during the search) and are counted by `close`, after the judge,
    which may label the example too; a draw Hypothesis rejected leaves none behind (`drawing`)."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.labels: Counter = Counter()

    def drawing(self, strategy):
        return afresh(strategy, self.labels)

    def close(self) -> None:
        self.counts.update(set(self.labels))
        self.labels.clear()


@st.composite
def afresh(draw, strategy, labels: Counter):
    """`strategy`'s draw with the labels of an earlier, rejected draw forgotten (no choice of its own: the
    draws stay those of the check)."""
    labels.clear()
    return draw(strategy)


def drawn(stage: Stage, tier: str, run_seed: int = 0, small: bool = False,
          profile: Profile = PROFILES["ci"]) -> Counter:
    """How many examples of `tier` fell in each labelled class, at `profile`'s budget and `run_seed`, drawn for a
    fast backend or (`small`) for the Triton interpreter; "examples": how many were drawn."""
    strategy = tier_draws(stage, tier, DrawContext(small=small))
    tally = Tally()
    if strategy is None:
        return tally.counts

    def probe(example) -> None:
        tally.labels["examples"] += 1
        tally.close()

    token = coverage.set(tally.labels)
    try:
        hypothesis_seed(seed_for(run_seed, stage.name, tier))(
            profile.hypothesis_settings(profile.count(tier))(given(tally.drawing(strategy))(probe)))()
    finally:
        coverage.reset(token)
    return tally.counts


@dataclass(frozen=True)
class Shortfall:
    stage: str
    floor: Floor
    small: bool
    seed: int
    count: int

    def __str__(self) -> str:
        where = "the interpreter's draws" if self.small else "the draws"
        return (f"{self.stage}: {self.floor.tier} class {self.floor.label!r} drawn {self.count} time(s) in {where} "
                f"of seed {self.seed}, under its floor {self.floor.least} ({self.floor.why})")


def draw_contexts(floor: Floor) -> tuple[bool, ...]:
    """The draws a floor holds for: the fast backends' (small=False), and the interpreter's where it says so."""
    return (False, True) if floor.interpreted else (False,)


def shortfalls(stage: Stage, seeds: tuple[int, ...] = FLOOR_SEEDS) -> list[Shortfall]:
    """Every floor of `stage` under its least count, per seed and draw context, at the ci budget."""
    found = []
    wanted = {(floor.tier, small) for floor in stage.floors for small in draw_contexts(floor)}
    for tier, small in sorted(wanted):
        for seed in seeds:
            counts = drawn(stage, tier, seed, small)
            for floor in stage.floors:
                if floor.tier == tier and small in draw_contexts(floor) and counts[floor.label] < floor.least:
                    found.append(Shortfall(stage.name, floor, small, seed, counts[floor.label]))
    return found
