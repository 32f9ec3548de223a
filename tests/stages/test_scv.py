"""Fixed cases and properties of the `scv` family: the acceptance mask by hand (a -1 draft, padding, a
request across the Triton tile), and the draft-length controller's promises: within its bounds,
monotone in the acceptance, deterministic, exact at the threshold."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specverify.judge.harness import oracle_outputs
from specverify.records import backends
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.runs.session import verify_example as verify
from specverify.stages import scv
from specverify.stages.scv import acceptance_mask_worked
from specverify.strategies.scv import adaptive_k_valid

MASK, ADAPTIVE = scv.ACCEPTANCE_MASK, scv.ADAPTIVE_K


def outputs_everywhere(stage, example: Example) -> dict[str, list]:
    for _, backend, device, why in backends.matrix([stage]):
        if why is None:
            verify(backends.target(stage, backend, device), example)
    return {name: view.tolist() for name, view in oracle_outputs(stage, example).items()}


def controllers():
    """The oracle and the host production version of adaptive_k."""
    return [backends.target(ADAPTIVE, b, "cpu").load() for b in ("oracle", "numpy")]


# --- scv.acceptance_mask -------------------------------------------------------------------------------

def test_worked_example():
    out = outputs_everywhere(MASK, acceptance_mask_worked())
    assert out["accepted_mask"] == [True, True, False, True, False, False, False]
    assert out["num_accepted"] == [2, 1, 0]


@pytest.mark.parametrize("reject_at", [255, 256, 257, 300])
def test_a_request_across_the_tile(reject_at):
    target = np.arange(300, dtype=np.int64) % 97
    draft = target.astype(np.int32)
    if reject_at < 300:
        draft[reject_at] += 1
    ex = Example("valid", inputs={"draft_token_ids": np.concatenate([[3], draft]).astype(np.int32),
                                  "target_token_ids": np.concatenate([[4], target]),
                                  "cu_num_draft_tokens": np.array([1, 301], np.int32)},
                 outputs={"accepted_mask": Buffer((301,), "bool"), "num_accepted": Buffer((2,), "int32")})
    out = outputs_everywhere(MASK, ex)
    assert out["num_accepted"] == [0, reject_at]
    assert out["accepted_mask"] == [False] + [True] * reject_at + [False] * (300 - reject_at)


def test_an_empty_batch_clears_the_padding():
    ex = Example("valid", inputs={"draft_token_ids": np.array([1, 2], np.int64),
                                  "target_token_ids": np.array([1, 2], np.int64),
                                  "cu_num_draft_tokens": np.zeros(0, np.int32)},
                 outputs={"accepted_mask": Buffer((2,), "bool"), "num_accepted": Buffer((0,), "int32")})
    assert outputs_everywhere(MASK, ex)["accepted_mask"] == [False, False]


# --- scv.adaptive_k ------------------------------------------------------------------------------------

def step(accepted, drafted, k=4, low=1, high=8, ratio=0.75, window=8):
    return [f(num_accepted_tokens=accepted, num_draft_tokens=drafted, current_k=k, min_k=low, max_k=high,
              target_ratio=ratio, window=window) for f in controllers()]


@pytest.mark.parametrize("accepted, drafted, ratio, expected", [
    ([3], [4], 0.75, 5),         # exactly at the target: up
    ([2], [4], 0.75, 4),         # between half the target and the target: kept
    ([1], [4], 0.5, 4),          # exactly at half the target (2a == ratio * d): kept
    ([0], [4], 0.5, 3),          # below half: down
    ([1], [10], 0.1, 4),         # 1/10 < the binary 0.1 (0.1000000000000000055...): not up
    ([], [], 0.75, 4),           # no history: kept
    ([0, 0], [0, 0], 0.75, 4),   # nothing drafted: kept
])
def test_controller_rule(accepted, drafted, ratio, expected):
    assert step(accepted, drafted, ratio=ratio) == [expected, expected]


def test_only_the_window_counts():
    assert step([0, 0, 4], [4, 4, 4], window=1) == [5, 5]
    assert step([0, 0, 4], [4, 4, 4], window=3) == [3, 3]


def test_clamped_into_the_bounds():
    assert step([4], [4], k=20, high=8) == [8, 8]
    assert step([0], [4], k=0, low=2) == [2, 2]


def call(f, ex: Example, **changes):
    return f(**{**ex.inputs, **changes})


@settings(max_examples=150, deadline=None)
@given(adaptive_k_valid(DrawContext()), st.data())
def test_within_bounds_monotone_and_deterministic(ex, data):
    x = ex.inputs
    accepted = [int(a) for a in x["num_accepted_tokens"]]
    drafted = [int(d) for d in x["num_draft_tokens"]]
    history = {"num_accepted_tokens": accepted, "num_draft_tokens": drafted}
    results = [call(f, ex, **history) for f in controllers()]
    assert results[0] == results[1] == call(controllers()[0], ex, **history)   # and again: the same
    assert type(results[0]) is int and x["min_k"] <= results[0] <= x["max_k"]
    room = [i for i in range(len(accepted)) if accepted[i] < drafted[i]]
    if room:   # one more accepted draft anywhere never gives a smaller K
        i = data.draw(st.sampled_from(room))
        more = accepted[:i] + [accepted[i] + 1] + accepted[i + 1:]
        for f, before in zip(controllers(), results):
            assert call(f, ex, num_accepted_tokens=more, num_draft_tokens=list(drafted)) >= before
