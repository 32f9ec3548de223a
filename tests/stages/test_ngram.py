"""The `ngram` family: the worked examples of every rule, named histories on every backend, the two references
agreeing on drawn histories, requests that stay independent, and planted bugs of the kinds engines shipped, each
caught and shrunk. The classes the strategy must reach are the record's floors (tests/records/test_floors.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specverify.cli import main
from specverify.judge.harness import oracle_outputs
from specverify.oracles.ngram import RULES
from specverify.records import backends
from specverify.records.dialects import judged
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.runs.session import verify_example as verify
from specverify.stages.ngram import PROPOSE, propose_worked
from tests.planted_runs import caught, planted_outcomes

RULE_NAMES = list(RULES)


def outputs_everywhere(rule: str, example: Example) -> dict[str, list]:
    """Every available backend of ours under `rule` must match its oracle; the oracle's outputs as lists."""
    stage = judged(PROPOSE, rule)
    for _, backend, device, why in backends.matrix([stage]):
        if why is None:
            verify(backends.target(stage, backend, device), example)
    return {name: view.tolist() for name, view in oracle_outputs(stage, example).items()}


def example(histories, k, min_n=1, max_n=4, max_model_len=1000, width=None, dtype="int32") -> Example:
    width = max([len(h) for h in histories] + [0]) if width is None else width
    tokens = np.full((len(histories), width), 77, dtype)
    for b, h in enumerate(histories):
        tokens[b, :len(h)] = h
    batch = len(histories)
    return Example("valid", inputs={"token_ids": tokens, "num_tokens": np.array([len(h) for h in histories], np.int64),
                                    "min_n": min_n, "max_n": max_n, "max_model_len": max_model_len},
                   outputs={"draft_token_ids": Buffer((batch, k), dtype),
                            "num_draft_tokens": Buffer((batch,), "int32")})


WORKED = {   # rule: (drafts, counts); None marks a slot the rule leaves unwritten
    "": ([[100, 1, -1], [7, 5, 6], [-1, -1, -1]], [2, 3, 0]),
    "short": ([[100, 1, None], [7, 5, 6], [None, None, None]], [2, 3, 0]),
    "uncapped": ([[100, 1, 2], [7, 5, 6], [-1, -1, -1]], [3, 3, 0]),
    "rightmost_last": ([[300, 1, 2], [7, 5, 6], [7, 7, 7]], [3, 3, 0]),
    "trtllm_newest": ([[300, 1, 2], [7, 5, 6], [5, 6, 0]], [3, 3, 2]),
    "trtllm_oldest": ([[100, 1, 2], [7, 5, 6], [5, 6, 0]], [3, 3, 2]),
}


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_the_worked_example_under_every_rule(rule):
    out = outputs_everywhere(rule, propose_worked())
    drafts, counts = WORKED[rule]
    assert out["num_draft_tokens"] == counts
    for got, wanted in zip(out["draft_token_ids"], drafts):
        assert [g for g, w in zip(got, wanted) if w is not None] == [w for w in wanted if w is not None]


@pytest.mark.parametrize("rule,drafts", [("", [100, 1]), ("rightmost_last", [300, 1])])
def test_the_leftmost_and_rightmost_occurrences_of_a_periodic_history(rule, drafts):
    """[1, 2, 3] occurs at 0, 4 and 8 with the followers 100, 200, 300; n = 3, K = 2."""
    h = [1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3]
    out = outputs_everywhere(rule, example([h], 2, min_n=3, max_n=3))
    assert out["draft_token_ids"] == [drafts] and out["num_draft_tokens"] == [2]


NAMED = {   # name: (histories, K, min_n, max_n, max_model_len, record rule's drafts, counts)
    "L < min_n": ([[5, 5]], 2, 3, 4, 100, [[-1, -1]], [0]),
    "L == min_n (no window with a follower)": ([[5, 5, 5]], 2, 3, 4, 100, [[-1, -1]], [0]),
    "L == min_n + 1 (one window, one follower)": ([[5, 5, 5, 5]], 2, 3, 4, 100, [[5, -1]], [1]),
    "one follower": ([[1, 2, 9, 9, 9]], 3, 1, 2, 100, [[9, -1, -1]], [1]),
    "K > L": ([[4, 6, 4]], 8, 1, 2, 100, [[6, 4] + [-1] * 6], [2]),
    "max_model_len - L = -1": ([[4, 6, 4]], 2, 1, 2, 2, [[-1, -1]], [0]),
    "max_model_len - L = 0": ([[4, 6, 4]], 2, 1, 2, 3, [[-1, -1]], [0]),
    "max_model_len - L = 1": ([[4, 6, 4]], 2, 1, 2, 4, [[6, -1]], [1]),
    "an empty history in a ragged batch": ([[], [3, 8, 3]], 2, 1, 2, 100, [[-1, -1], [8, 3]], [0, 2]),
    "the longest n first": ([[2, 5, 1, 2, 7, 1, 2]], 1, 1, 3, 100, [[7]], [1]),
    "ids near 2**31": ([[2**31 - 1, 0, 2**31 - 1]], 2, 1, 2, 100, [[0, 2**31 - 1]], [2]),
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_histories(name):
    histories, k, min_n, max_n, cap, drafts, counts = NAMED[name]
    out = outputs_everywhere("", example(histories, k, min_n, max_n, cap, width=8 if name != "K > L" else 3))
    assert out["draft_token_ids"] == drafts and out["num_draft_tokens"] == counts


@pytest.mark.parametrize("rule", RULE_NAMES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_oracle_equals_the_suffix_length_search(rule, data):
    """Two references written two ways (windows by n; match lengths by position, picked by a key) agree on the
    drawn histories of both tiers."""
    stage = judged(PROPOSE, rule)
    ex = data.draw(stage.strategy(data.draw(st.sampled_from(["valid", "hazard"])))(DrawContext()))
    assert stage.invariants(ex, oracle_outputs(stage, ex)) == []


def planted_verdict(tmp_path, capsys, impl: str, *extra: str) -> dict:
    return planted_outcomes(tmp_path, capsys, "ngram.propose", f"tests.planted_ngram:{impl}", *extra)


@pytest.mark.parametrize("impl,declared", [
    ("leftmost_for_rightmost", "rightmost_last"), ("cap_off_by_one", ""), ("zero_fill", ""),
    ("pattern_one_short", ""), ("match_at_the_end", "")])
def test_a_planted_bug_is_caught_and_shrunk(tmp_path, capsys, impl, declared):
    valid, shrunk = caught(tmp_path, capsys, "ngram.propose", f"tests.planted_ngram:{impl}", "valid", 100,
                           *(["--dialect", declared] if declared else []))
    assert shrunk.inputs["token_ids"].shape[0] <= 3, valid["headline"]


def test_a_pooled_kernel_fails_the_independent_check(tmp_path, capsys):
    outcomes = planted_verdict(tmp_path, capsys, "pooled_leftmost", "--check", "independent")
    headline = outcomes["independent"]["headline"]
    assert "changing request" in headline and "inputs changed request" in headline, headline


def test_our_kernels_keep_requests_independent_and_pooled_rules_are_not_asked():
    from specverify.runs.independence import applies
    for rule in RULE_NAMES:
        target = backends.target(judged(PROPOSE, rule), "torch", "cpu")
        assert (applies(target) is None) == (not RULES[rule].pooled), rule


@pytest.mark.parametrize("rule", ["rightmost_last", "trtllm_oldest"])
def test_an_outside_kernel_of_another_rule_is_told_which_rule_it_may_follow(tmp_path, capsys, rule):
    report = tmp_path / "r.json"
    status = main(["check", "--stage", "ngram.propose", "--impl", f"specverify.kernels.torch.ngram:propose_{rule}",
                   "--device", "cpu", "--check", "valid", "--json", str(report), "--findings", str(tmp_path / "f")])
    out = capsys.readouterr().out
    [verdict] = json.loads(report.read_text())["verdicts"]
    assert status == 1 and verdict["follows"] == [rule], verdict["rules"]
    assert f'declare dialect = "{rule}"' in out
