"""Fixed cases and properties of the `stop` family: the speculative check equals the ordinary one fed a
token at a time (named scenarios by hand, and drawn inputs), padding never matches, without stop
ids no stop-id work is done, and a shipped bug planted in our kernel is caught by the valid tier."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from specverify.judge.harness import oracle_outputs
from specverify.oracles.stop import sequential_stopping
from specverify.records import backends
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.runs.session import verify_example as verify
from specverify.stages import stop
from specverify.stages.stop import spec_stopping_worked
from specverify.strategies.stop import BEFORE_THE_CAP, reached, spec_stopping_valid
from tests.planted_runs import caught

STAGE = stop.SPEC_STOPPING


def outputs_everywhere(example: Example) -> dict[str, list]:
    """Every available backend must match the oracle; the oracle's outputs as lists."""
    for _, backend, device, why in backends.matrix([STAGE]):
        if why is None:
            verify(backends.target(STAGE, backend, device), example)
    return {name: view.tolist() for name, view in oracle_outputs(STAGE, example).items()}


def example(tokens, budgets, stop_ids=None, with_counts=True) -> Example:
    tokens = np.array(tokens, np.int32)
    batch = len(tokens)
    return Example("valid", inputs={
        "output_token_ids": tokens,
        "num_rejected_tokens": (tokens == -1).sum(axis=1).astype(np.int32) if with_counts else None,
        "num_appendable": np.array(budgets, np.int64),
        "stop_ids": None if stop_ids is None else np.array(stop_ids, np.int64)},
        outputs={"stop_pos": Buffer((batch,), "int32"), "stopped": Buffer((batch,), "bool"),
                 "new_num_appendable": Buffer((batch,), "int64")})


def reference(ex: Example) -> dict[str, list]:
    x = ex.inputs
    rows = [sequential_stopping(x["output_token_ids"][r], x["num_appendable"][r],
                                None if x["stop_ids"] is None else x["stop_ids"][r])
            for r in range(len(x["num_appendable"]))]
    return {"stop_pos": [r[1] for r in rows], "stopped": [r[2] for r in rows],
            "new_num_appendable": [r[3] for r in rows]}


SCENARIOS = {   # name: (tokens, budgets, stop ids, expected stop_pos, expected new budget)
    "EOS at a draft position": ([[4, 2, 5, 6]], [10], [[2, -1]], [1], [0]),
    "EOS as the bonus": ([[4, 5, 6, 2]], [10], [[2, -1]], [3], [0]),
    "EOS exactly at the length cap": ([[4, 5, 2, -1]], [3], [[2, -1]], [2], [0]),
    "the cap crossed mid-run": ([[4, 5, 6, 7]], [2], [[2, -1]], [1], [-2]),
    "EOS before the cap crossed in one step": ([[4, 2, 5, 6]], [3], [[2, -1]], [1], [-1]),
    "the budget already spent": ([[4, 5, -1, -1]], [-1], None, [0], [-3]),
    "two rows with different stop ids": ([[4, 3, 7, -1], [3, 4, 7, 8]], [9, 9], [[4, -1], [7, 8]], [0, 2], [0, 0]),
    "padding never matches a placeholder": ([[4, -1, -1, -1]], [9], [[-1, -1]], [-1], [8]),
    "no stop": ([[4, 5, -1, -1]], [9], [[1, 2]], [-1], [7]),
}


@pytest.mark.parametrize("with_counts", [True, False])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_named_scenarios(name, with_counts):
    tokens, budgets, ids, positions, left = SCENARIOS[name]
    ex = example(tokens, budgets, ids, with_counts)
    out = outputs_everywhere(ex)
    assert out["stop_pos"] == positions
    assert out["stopped"] == [p >= 0 for p in positions]
    assert out["new_num_appendable"] == left
    assert out == reference(ex)


@settings(max_examples=200, deadline=None)
@given(spec_stopping_valid(DrawContext()))
def test_the_oracle_equals_feeding_tokens_one_at_a_time(ex):
    """Drawn rows (every scenario of the strategy, stop ids None, empty, shared and per row)."""
    out = {name: view.tolist() for name, view in oracle_outputs(STAGE, ex).items()}
    assert out == reference(ex)
    tokens = ex.inputs["output_token_ids"]
    for r, position in enumerate(out["stop_pos"]):
        kept, *_ = sequential_stopping(tokens[r], ex.inputs["num_appendable"][r],
                                       None if ex.inputs["stop_ids"] is None else ex.inputs["stop_ids"][r])
        emitted = [int(t) for t in tokens[r] if t != -1]
        assert kept == (emitted[:position + 1] if position >= 0 else emitted)


def test_worked_example():
    out = outputs_everywhere(spec_stopping_worked())
    assert out == {"stop_pos": [2, 1, -1], "stopped": [True, True, False], "new_num_appendable": [0, 0, 4]}


@pytest.mark.parametrize("stop_ids", [None, np.zeros((2, 0), np.int32)], ids=["None", "no columns"])
def test_no_stop_ids_means_no_stop_id_work(monkeypatch, stop_ids):
    from specverify.kernels.torch import stop as torch_stop

    def refuse(*_):
        raise AssertionError("stop ids compared although there are none")

    monkeypatch.setattr(torch_stop, "first_stop_hit", refuse)
    ex = example([[4, 5, 6], [7, -1, -1]], [2, 5])
    ex.inputs["stop_ids"] = stop_ids
    assert outputs_everywhere(ex)["stop_pos"] == [1, -1]


def test_the_cap_checked_before_the_stop_ids_is_caught_and_shrunk(tmp_path, capsys):
    """SGLang #31599 planted in our Torch kernel (`tests/planted_stop.py`): the valid tier at the ci budget
    fails it and shrinks to a small batch with a row whose stop id comes before the token that spends its
    budget, both in this step."""
    valid, shrunk = caught(tmp_path, capsys, STAGE.name, "tests.planted_stop:cap_before_stop_ids")
    x = shrunk.inputs
    assert x["output_token_ids"].shape[0] <= 3, valid["headline"]
    assert reached(x["output_token_ids"], x["num_appendable"], x["stop_ids"])[:1] == [BEFORE_THE_CAP]
