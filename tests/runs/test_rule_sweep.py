"""The invalid check asks every value rule its draws offer at the ci budget, however the draws fell
(`specverify.runs.search.swept`)."""
from __future__ import annotations

import pytest

from specverify.records.backends import target
from specverify.records.registry import all_stages
from specverify.runs.profiles import PROFILES
from specverify.runs.protocol import Context
from specverify.runs.search import search
from specverify.strategies.blocks import asked_rules

WITH_VALUE_RULES = [name for name, stage in all_stages().items() if stage.invalid is not None]


def invalid_check(name: str, seed: int):
    """(the value rules its draws offered, the rules it asked, the outcome) of the invalid check of `name`'s
    first backend (Torch, NumPy for a host stage) at the ci budget, judging nothing."""
    stage, offered = all_stages()[name], set()
    ctx = Context(PROFILES["ci"], seed, None, None, None, False, deadline=None)
    outcome = search(target(stage, next(iter(stage.impls)), "cpu"), "invalid", "invalid",
                     PROFILES["ci"].count("invalid"), lambda *_: {}, ctx, offered=offered)
    return offered, asked_rules(outcome.coverage), outcome


@pytest.mark.parametrize("name", WITH_VALUE_RULES)
def test_every_value_rule_offered_is_asked_on_seeds_0_to_3(name):
    for seed in range(4):
        offered, asked, outcome = invalid_check(name, seed)
        unasked = offered - asked - {note.split("'")[1] for note in outcome.notes if note.startswith("value rule ")}
        assert outcome.status == "passed" and offered and not unasked, (seed, sorted(unasked))
