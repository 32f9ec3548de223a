"""The invalid check asks every value rule its draws offer at the ci budget, however the draws fell
(`specverify.runs.search.swept`)."""
from __future__ import annotations

import pytest

from specverify.records.backends import target
from specverify.records.registry import all_stages
from specverify.runs.profiles import PROFILES
from specverify.runs.protocol import Context
from specverify.runs.search import search

WITH_VALUE_RULES = [name for name, stage in all_stages().items() if stage.invalid is not None]


def asked(name: str, seed: int):
    """The value rules the invalid check of `name`'s first backend (Torch, NumPy for a host stage) asks at the ci
    budget (judging nothing), and its outcome."""
    stage = all_stages()[name]
    ctx = Context(PROFILES["ci"], seed, None, None, None, False, deadline=None)
    outcome = search(target(stage, next(iter(stage.impls)), "cpu"), "invalid", "invalid",
                     PROFILES["ci"].count("invalid"), lambda *_: {}, ctx)
    return {label.removeprefix("invalid: ") for label in outcome.coverage if label.startswith("invalid: ")}, outcome


@pytest.mark.parametrize("name", WITH_VALUE_RULES)
def test_every_value_rule_offered_is_asked_on_seeds_0_to_3(name, monkeypatch):
    from specverify.strategies import blocks

    seen: set = set()
    original = blocks.invalid_rule

    def noting(example):
        key = original(example)
        seen.add(key)
        return key

    monkeypatch.setattr(blocks, "invalid_rule", noting)
    for seed in range(4):
        seen.clear()
        ruled, outcome = asked(name, seed)
        unasked = seen - ruled - {note.split("'")[1] for note in outcome.notes if note.startswith("value rule ")}
        assert outcome.status == "passed" and not unasked, (seed, sorted(unasked))
