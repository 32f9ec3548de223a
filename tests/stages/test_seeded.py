"""`seeded.chain_sampling` by hand: the worked example's outputs, the planted states that draw exactly 1.0, the
fallback a draw of 1.0 takes at the pick, and the streams keyed by the row, on the oracle and our kernels."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specverify import env

env.prepare()            # the interpreter flag must be set before any kernel is defined

from specverify.kernels.torch import seeded as torch_seeded  # noqa: E402
from specverify.oracles import generators  # noqa: E402
from specverify.oracles import seeded as oracle  # noqa: E402
from specverify.stages.seeded import chain_sampling_worked  # noqa: E402
from specverify.strategies.seeded import ONE_WORDS, as_int64  # noqa: E402

BACKENDS = ["oracle", "torch", "triton"]


def run(backend: str, inputs: dict) -> tuple[list, list, list]:
    """(output_token_ids, accepted, emitted) of `backend` on `inputs` (numpy arrays; the counters added into)."""
    batch, k = inputs["draft_token_ids"].shape
    fields = {name: value.copy() for name, value in inputs.items()}
    fields["output_token_ids"] = np.full((batch, k + 1), 99, np.int32)
    if backend == "oracle":
        oracle.chain_sampling(**fields)
    else:
        if backend == "torch":
            kernel = torch_seeded.chain_sampling
        else:
            from specverify.kernels.triton import seeded as triton_seeded
            kernel = triton_seeded.chain_sampling
        tensors = {name: torch.from_numpy(value) for name, value in fields.items()}
        kernel(**tensors)
        fields = {name: tensor.numpy() for name, tensor in tensors.items()}
    return (fields["output_token_ids"].tolist(), fields["output_accepted_token_num"].tolist(),
            fields["output_emitted_draft_token_num"].tolist())


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_worked_example_is_as_its_docstring_says(backend):
    assert run(backend, chain_sampling_worked().inputs) == ([[1, 1, -1], [2, -1, -1]], [6, 8], [6, 7])


@pytest.mark.parametrize("seed, subsequence, n", ONE_WORDS)
def test_each_planted_state_draws_exactly_one(seed, subsequence, n):
    assert generators.curand_uniforms(seed, subsequence, n, 1)[0] == 1.0
    assert generators.curand_uniforms(seed, subsequence, n - 1, 1)[0] < 1.0


def one_at(draw_index: int, k: int, vocab: int, p_rows, q_rows, drafts) -> dict:
    """One request (row 0) whose stream draws exactly 1.0 at `draw_index`."""
    seed, _, n = next(w for w in ONE_WORDS if w[1] == 0)
    return {"draft_probs": np.array([q_rows], np.float32).reshape(1, k, vocab),
            "draft_token_ids": np.array([drafts], np.int32),
            "target_probs": np.array([p_rows], np.float32).reshape(1, k + 1, vocab),
            "seed": as_int64([seed]), "offset": as_int64([n - draw_index]),
            "output_accepted_token_num": np.zeros(1, np.int32), "output_emitted_draft_token_num": np.zeros(1, np.int32)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_draw_of_one_at_the_pick_takes_the_last_positive_cell(backend):
    """K = 1, the draft rejected (q = 1 >= p); U_2 = 1.0: t is the whole sum, which no running sum exceeds, so the
    token is the largest v with a positive cell (2), not V - 1."""
    inputs = one_at(2, 1, 4, [[0.25, 0, 0.5, 0], [0.25] * 4], [[0, 1, 0, 0]], [1])
    assert run(backend, inputs) == ([[2, -1]], [0], [0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_draw_of_one_rejects_a_draft_whose_q_equals_p(backend):
    """U_0 = 1.0 and q = p at the draft: f32(1.0 * q) < p fails (a tie), so the draft is rejected and the row
    max(p - q, 0) is all zero: -1."""
    inputs = one_at(0, 1, 2, [[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5]], [0])
    assert run(backend, inputs) == ([[-1, -1]], [0], [0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_with_one_seed_and_offset_draw_different_streams(backend):
    """The subsequence is the row: two requests with the same seed, offset and tables differ where their
    streams do (a kernel that keys the stream by seed and offset alone gives both the same output)."""
    k, vocab, rows = 4, 2, 64
    inputs = {"draft_probs": np.full((rows, k, vocab), 0.5, np.float32),
              "draft_token_ids": np.zeros((rows, k), np.int32),
              "target_probs": np.full((rows, k + 1, vocab), 0.25, np.float32),
              "seed": np.full(rows, 7, np.int64), "offset": np.full(rows, 3, np.int64),
              "output_accepted_token_num": np.zeros(rows, np.int32),
              "output_emitted_draft_token_num": np.zeros(rows, np.int32)}
    tokens, accepted, _ = run(backend, inputs)
    assert len({tuple(row) for row in tokens}) > 1 and len(set(accepted)) > 1
    assert (tokens, accepted) == run("oracle", inputs)[:2]
