"""What a stage's targets share (`specverify.judge.stage_memo`, `session.stage_scope`): the targets after the first
are judged against the answers the oracle gave on the same drawn examples, found by their exact bytes,
never across oracles (the oracle target still calls the oracle itself), and are handed the draws of an
earlier passing search; and the draws themselves depend on the seed alone."""
import hashlib
import importlib
import pickle
from dataclasses import replace

import numpy as np
import pytest

from specverify.judge import harness, materialize, stage_memo
from specverify.records import backends, dialects, registry
from specverify.records.backends import BACKENDS, Target
from specverify.runs import search, session

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
    guarded = -(-examples // plan.profile.guard_every)    # the ci profile runs one example in four a second time
    # expected twice (two poisons), then called: once, and again with the second guard pattern where guarded
    assert [o.oracle_calls for o in alone] == [3 * examples + guarded, 2 * examples]
    assert shared[0].oracle_calls >= examples       # the oracle target calls the oracle on every example
    assert shared[1].oracle_calls == 0              # the torch target is judged against the answers kept


def test_an_answer_is_found_by_exact_bytes_and_oracle_only():
    example = EXPAND.worked()
    with stage_memo.scope() as memo:
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
    with stage_memo.scope():
        kept = harness.expect(EXPAND, example)
        with pytest.raises(ValueError, match="read-only"):
            kept.after[0] = 1
    plan, arena = materialize.plan(EXPAND, example)
    small = stage_memo.Memo(budget=kept.after.nbytes)        # too small for the answer's arrays
    key = small.key(EXPAND, plan, arena)
    small.keep(key, harness._expect(EXPAND, example))
    assert small.find(key, plan, arena) is None and small.used == 0


def fingerprints(outcome_examples):
    return [hashlib.sha256(pickle.dumps((e.inputs, e.outputs, e.layouts))).hexdigest() for e in outcome_examples]


def drawn(target, plan, monkeypatch):
    """The examples a target's valid search hands its judge, in order."""
    seen = []
    judge = search.verify_tier
    monkeypatch.setattr(search, "verify_tier", lambda t, example, ctx: (seen.append(example), judge(t, example, ctx))[1])
    session.run_target(target, plan, session.Listener(), {"valid"})
    monkeypatch.setattr(search, "verify_tier", judge)
    return fingerprints(seen)


def test_the_same_seed_draws_the_same_whatever_local_modules_are_loaded(tmp_path, monkeypatch):
    """Hypothesis mixes constants from the source of every local module loaded into its draws; a module
    imported between two searches (here one full of small integers, outside site-packages) must not
    change what the same seed draws, or two workers with different histories would check other examples."""
    target = backends.target(registry.all_stages()["rejection.greedy"], "oracle", "cpu")
    plan = session.RunPlan.build("ci", examples=60, keep_findings=False)
    before = drawn(target, plan, monkeypatch)
    (tmp_path / "many_constants.py").write_text("VALUES = [" + ", ".join(map(str, range(3, 3000, 7))) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("many_constants")
    assert drawn(target, plan, monkeypatch) == before


def test_a_later_target_is_handed_the_draws_of_an_earlier_passing_search(monkeypatch):
    """Within a stage's scope the torch target's search hands its judge the oracle target's examples again
    (the same ones Hypothesis would draw), with the same coverage; a target that fails one of them runs
    its own search and finds the failure as without the scope."""
    stage = registry.all_stages()["rejection.greedy"]
    plan = session.RunPlan.build("ci", examples=40, keep_findings=False, checks=("valid",))
    oracle, torch_target = backends.target(stage, "oracle", "cpu"), backends.target(stage, "torch", "cpu")
    alone = drawn(torch_target, plan, monkeypatch)
    [without] = session.run_target(torch_target, plan, session.Listener())
    runs = []
    strategy = search.tier_strategy
    monkeypatch.setattr(search, "tier_strategy", lambda *a: (runs.append(1), strategy(*a))[1])   # Hypothesis runs
    with session.stage_scope():
        first = drawn(oracle, plan, monkeypatch)
        assert len(runs) == 1
        shared = drawn(torch_target, plan, monkeypatch)
        [with_scope] = session.run_target(torch_target, plan, session.Listener())
        assert len(runs) == 1
    assert shared == alone == first
    assert (with_scope.examples, with_scope.coverage) == (without.examples, without.coverage)
    planted = Target(stage, BACKENDS["torch"], "cpu", "tests.planted_greedy:bonus_even_after_reject")
    [failed_alone] = session.run_target(planted, plan, session.Listener())
    with session.stage_scope():
        session.run_target(oracle, plan, session.Listener())
        [failed_shared] = session.run_target(planted, plan, session.Listener())
    assert failed_alone.status == failed_shared.status == "failed"
    assert (failed_alone.found_after, failed_alone.headline) == (failed_shared.found_after, failed_shared.headline)


def test_a_dialect_that_keeps_the_records_draws_shares_them(monkeypatch):
    """tree.verify_greedy's longest_path has no strategy of its own: its targets are handed the record's
    draws; rejection.random's strict draws its own valid tier, so its search runs with Hypothesis."""
    plan = session.RunPlan.build("ci", examples=30, keep_findings=False, checks=("valid",))
    runs = []
    hypothesis_seed = search.hypothesis_seed       # called once per search that runs with Hypothesis
    monkeypatch.setattr(search, "hypothesis_seed", lambda seed: (runs.append(1), hypothesis_seed(seed))[1])
    for name, dialect, shared in (("tree.verify_greedy", "longest_path", True), ("rejection.random", "strict", False)):
        stage = registry.all_stages()[name]
        alone = drawn(backends.target(stage, "torch", "cpu", dialect=dialect), plan, monkeypatch)
        with session.stage_scope():
            drawn(backends.target(stage, "oracle", "cpu"), plan, monkeypatch)
            before = len(runs)
            assert drawn(backends.target(stage, "torch", "cpu", dialect=dialect), plan, monkeypatch) == alone
            assert len(runs) == before + (0 if shared else 1), name
