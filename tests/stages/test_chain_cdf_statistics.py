"""Statistical tier of `rejection.chain_cdf`: its inverse-CDF sampler keeps the target distribution.

With each draft d_pos drawn from q_pos and fresh U[0, 1) f32 uniforms (one per position, one u_final
per request), the token emitted at position pos, among the requests that reach pos, follows p_pos, and
P(accept at pos | reach pos) = sum_v min(p_pos(v), q_pos(v)). Checked on the worked example's rows
(V = 4, K = 2: p_0 = [.25, .25, .375, .125], q_0 = [.125, .5, .25, .125], p_1 uniform, q_1 one-hot at 2,
p_2 = [0, .5, .25, .25]) with B = N = 20 000 requests in one call: five p-values (the histograms at
positions 0, 1 and the bonus slot 2, the acceptance counts at 0 and 1), each against ALPHA = 1e-6, on
the oracle and on the Torch kernel. Seeds are fixed, so the outcome is deterministic.

Power. Two biased samplers, each the real oracle with its pick on a rejection replaced, must fail the
position-0 histogram (3 degrees of freedom, critical value 30.7 at ALPHA):
    resample-from-p   the pick walks p_0 instead of the residual: out[0] ~ [.1875, .3125, .34375,
                      .15625], noncentrality N * 0.0417 = 833, power 1.0000 (at N = 1 000: 0.86)
    mass-at-draft     only the drafted cell loses q: out[0] ~ [.2083, .25, .375, .1667], noncentrality
                      N * 0.0208 = 417, power 1.0000 (at N = 1 000: 0.22)
(`test_stated_power` recomputes these from the noncentral chi-square.)
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specverify import env
from specverify.oracles import rejection as oracle
from tests.goodness_of_fit import binomial_fit, histogram_fit

ALPHA = 1e-6
N = 20_000
P = np.array([[0.25, 0.25, 0.375, 0.125], [0.25, 0.25, 0.25, 0.25], [0, 0.5, 0.25, 0.25]], np.float32)
Q = np.array([[0.125, 0.5, 0.25, 0.125], [0, 0, 1, 0]], np.float32)
K, V = Q.shape


def draw_inputs(seed: int, batch: int = N) -> dict:
    """One call's inputs: B copies of the rows, drafts d_pos ~ q_pos, fresh f32 uniforms, zeroed outputs."""
    rng = np.random.default_rng(seed)
    drafts = np.stack([rng.choice(V, batch, p=Q[pos].astype(np.float64)) for pos in range(K)], 1)
    return {"candidates": np.concatenate([np.zeros((batch, 1), np.int64), drafts], 1).astype(np.int64),
            "target_probs": np.broadcast_to(P, (batch, K + 1, V)).copy(),
            "draft_probs": np.broadcast_to(Q, (batch, K, V)).copy(),
            "uniform_samples": rng.random((batch, K + 1), dtype=np.float32),
            "uniform_final": rng.random(batch, dtype=np.float32),
            "predicts": np.zeros(batch * (K + 1), np.int32), "accept_index": np.zeros((batch, K + 1), np.int32),
            "accept_token_num": np.zeros(batch, np.int32)}


def torch_kernel(**args) -> None:
    import torch

    env.prepare()
    from specverify.kernels.torch.rejection import chain_cdf

    tensors = {k: torch.from_numpy(v) for k, v in args.items()}
    chain_cdf(**tensors)


def replaced_pick(residual_of):
    """The oracle with the pick after a rejection taken from `residual_of(p_row, q_row, draft)` instead."""
    def sampler(**args) -> None:
        oracle.chain_cdf(**args)
        nums, cand = args["accept_token_num"], args["candidates"]
        for b in np.flatnonzero(nums < K):
            num = int(nums[b])
            res = residual_of(args["target_probs"][b, num], args["draft_probs"][b, num], int(cand[b, num + 1]))
            args["predicts"][b * (K + 1) + num] = oracle.pick(res, args["uniform_final"][b])
    return sampler


def mass_at_draft(p_row, q_row, draft):
    res = p_row.copy()
    res[draft] = max(p_row[draft] - q_row[draft], 0)
    return res


SAMPLERS = {"oracle": oracle.chain_cdf, "torch": torch_kernel}
BIASED = {"resample-from-p": replaced_pick(lambda p_row, q_row, draft: p_row), "mass-at-draft":
          replaced_pick(mass_at_draft)}


def fits(args: dict) -> dict:
    """The five tests of one call: histograms at positions 0, 1, 2 and acceptance at 0 and 1."""
    out = args["predicts"].reshape(-1, K + 1)
    num = args["accept_token_num"]
    found = {}
    for pos in range(K + 1):
        emitted = out[num >= pos, pos]
        if ((emitted < 0) | (emitted >= V)).any():
            found[f"pos {pos}: emitted ~ p"] = 0.0
            continue
        found[f"pos {pos}: emitted ~ p"] = histogram_fit(np.bincount(emitted, minlength=V), P[pos]).pvalue
        if pos < K:
            accept = float(np.minimum(P[pos], Q[pos]).sum())
            found[f"pos {pos}: P(accept) = {accept}"] = binomial_fit(int((num > pos).sum()), int((num >= pos).sum()),
                                                                     accept).pvalue
    return found


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_chain_cdf_keeps_the_target(name):
    args = draw_inputs(seed=18)
    SAMPLERS[name](**args)
    failures = {test: p for test, p in fits(args).items() if p < ALPHA}
    assert not failures, f"{name}: {failures}"


@pytest.mark.parametrize("name", sorted(BIASED))
def test_biased_pick_is_rejected(name):
    args = draw_inputs(seed=19)
    BIASED[name](**args)
    assert fits(args)["pos 0: emitted ~ p"] < ALPHA, f"{name} was not detected at alpha={ALPHA}"


def biased_distribution(residual_of) -> np.ndarray:
    """The exact law of out[0] under a pick rule: P(accept v) + P(reject) * the rule's residual, averaged
    over the draft."""
    p, q = P[0].astype(np.float64), Q[0].astype(np.float64)
    law = np.minimum(p, q)
    for d in range(V):
        reject = q[d] - min(p[d], q[d])
        if reject > 0:
            res = np.asarray(residual_of(p, q, d), np.float64)
            law += reject * res / res.sum()
    return law


def test_stated_power():
    """The docstring's laws and powers: the correct rule gives p_0 exactly; the biased ones are far enough
    from it that N = 20 000 rejects them with power above 0.9999."""
    correct = biased_distribution(lambda p, q, d: np.maximum(p - q, 0))
    assert np.allclose(correct, P[0])
    critical = stats.chi2.isf(ALPHA, V - 1)
    assert round(critical, 1) == 30.7
    for name, rule, law, small in (("resample-from-p", lambda p, q, d: p, [.1875, .3125, .34375, .15625], 0.86),
                                   ("mass-at-draft", mass_at_draft, [.2083, .25, .375, .1667], 0.22)):
        found = biased_distribution(rule)
        assert np.allclose(found, law, atol=1e-4), name
        shift = float(((found - P[0]) ** 2 / P[0]).sum())
        assert stats.ncx2.sf(critical, V - 1, N * shift) > 0.9999, name
        assert round(float(stats.ncx2.sf(critical, V - 1, 1000 * shift)), 2) == small, name
