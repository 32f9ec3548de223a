"""The oracle's answers shared within a stage (`specverify.oracle_memo`, `session.stage_scope`): the targets
after the first are judged against the answers the oracle gave on the same drawn examples, found by their
exact bytes, never across oracles; the oracle target still calls the oracle itself."""
from dataclasses import replace

import numpy as np
import pytest

from specverify import backends, dialects, harness, materialize, oracle_memo, registry, session

EXPAND = registry.all_stages()["rejection.expand"]
RANDOM = registry.all_stages()["rejection.random"]


def counting(stage):
    """The record with an oracle that counts its calls."""
    calls = []

    def oracle(**kw):
        calls.append(1)
        return stage.oracle(**kw)

    return replace(stage, oracle=oracle), calls


def summary(outcomes):
    return [(o.backend, o.check, o.status, o.examples, o.found_after) for o in outcomes]


def test_the_targets_after_the_first_reuse_the_oracles_answers():
    stage, calls = counting(EXPAND)
    plan = session.RunPlan.build("ci", examples=20, keep_findings=False, checks=("valid",))
    targets = [backends.target(stage, "oracle", "cpu"), backends.target(stage, "torch", "cpu")]
    alone = []
    for target in targets:
        before = len(calls)
        alone += session.run_target(target, plan, session.Listener())
        alone[-1].oracle_calls = len(calls) - before
    with session.stage_scope():
        shared = []
        for target in targets:
            before = len(calls)
            shared += session.run_target(target, plan, session.Listener())
            shared[-1].oracle_calls = len(calls) - before
    assert summary(shared) == summary(alone)
    examples = shared[0].examples
    assert [o.oracle_calls for o in alone] == [3 * examples, 2 * examples]   # expected twice (two poisons), call once
    assert shared[0].oracle_calls >= examples       # the oracle target calls the oracle on every example
    assert shared[1].oracle_calls == 0              # the torch target is judged against the answers kept


def test_an_answer_is_found_by_exact_bytes_and_oracle_only():
    example = EXPAND.worked()
    with oracle_memo.scope() as memo:
        first = harness.expect(EXPAND, example)
        assert harness.expect(EXPAND, example) is first and memo.found == 1
        changed = replace(example, inputs={name: (value.copy() if isinstance(value, np.ndarray) else value)
                                           for name, value in example.inputs.items()})
        name = next(n for n, v in changed.inputs.items() if isinstance(v, np.ndarray) and v.size)
        changed.inputs[name].reshape(-1)[-1] += 1           # one element of one input
        assert harness.expect(EXPAND, changed) is not first
        drawn = RANDOM.worked()
        strict = harness.expect(dialects.judged(RANDOM, "strict"), drawn)
        record = harness.expect(RANDOM, drawn)
        assert record is not strict and harness.expect(RANDOM, drawn) is record    # each oracle its own
    assert memo.found == 2
    assert harness.expect(EXPAND, example) is not first     # no scope: nothing shared


def test_kept_answers_are_read_only_and_bounded():
    example = EXPAND.worked()
    with oracle_memo.scope() as memo:
        kept = harness.expect(EXPAND, example)
        with pytest.raises(ValueError, match="read-only"):
            kept.after[0] = 1
    plan, arena = materialize.plan(EXPAND, example)
    small = oracle_memo.Memo(budget=kept.after.nbytes)        # too small for the answer's arrays
    key = small.key(EXPAND, plan, arena)
    small.keep(key, harness._expect(EXPAND, example))
    assert small.find(key, plan, arena) is None and small.used == 0
