"""Chain samplers of `seeded.chain_sampling`'s signature whose random numbers are their own (NumPy's PCG64,
keyed by the launch's seeds and offsets): an honest one and one per bug class the distribution tier must catch.
They are the planted bugs its power is measured on (bench/distribution_power.py) and its tests run against.

- `honest`: speculative sampling as the contract states it, with other uniforms;
- `residual_at_draft`: after a rejection, draws from p with the draft's mass removed at the drafted token only;
- `recovery_from_p`: after a rejection, draws from p itself instead of (p - q)+;
- `q_not_sampled`: accepts and draws the residual against a uniform q, not the q the drafts were drawn from;
- `shared_uniform`: one uniform for every acceptance test of a row (the bug of FlashInfer PR #424).
Each declares `randomness = "own"`.
"""
from __future__ import annotations

import hashlib

import numpy as np

from specverify.strategies.probability_tables import inverse_cdf

PLACEHOLDER = -1


def _uniforms(seed: np.ndarray, offset: np.ndarray, rows: int, count: int) -> np.ndarray:
    """[rows, count] uniforms in [0, 1), the same for the same seeds and offsets."""
    digest = hashlib.sha256(np.ascontiguousarray(seed).tobytes() + np.ascontiguousarray(offset).tobytes()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little")).random((rows, count))


def _sample(bug: str, draft_probs, draft_token_ids, target_probs, seed, offset, output_token_ids,
            output_accepted_token_num, output_emitted_draft_token_num) -> None:
    q, drafts, p = (np.asarray(t.cpu(), np.float64 if t.dtype.is_floating_point else np.int64)
                    for t in (draft_probs, draft_token_ids, target_probs))
    batch, k, vocab = q.shape
    if batch == 0:
        return
    if bug == "q_not_sampled":
        q = np.full_like(q, 1.0 / vocab)
    u = _uniforms(np.asarray(seed.cpu()), np.asarray(offset.cpu()), batch, 2 * k + 1)
    rows = np.arange(batch)
    clipped = np.clip(drafts, 0, vocab - 1)
    in_vocab = (drafts >= 0) & (drafts < vocab)
    cols = np.arange(k)
    pd, qd = p[rows[:, None], cols[None, :], clipped], q[rows[:, None], cols[None, :], clipped]
    coins = np.repeat(u[:, :1], k, axis=1) if bug == "shared_uniform" else u[:, :k]
    passes = in_vocab & (coins * qd < pd)
    n = np.cumprod(passes, axis=1).sum(axis=1)
    later = in_vocab & (u[:, k:2 * k] * qd < pd) & (cols[None, :] > n[:, None])
    p_n = p[rows, n]
    q_n = np.where((n < k)[:, None], q[rows, np.minimum(n, k - 1)], 0.0) if k else np.zeros_like(p_n)
    if bug == "recovery_from_p":
        res = p_n
    elif bug == "residual_at_draft":
        res = p_n.copy()
        at = np.flatnonzero(n < k)
        d = clipped[at, n[at]]
        res[at, d] = np.maximum(p_n[at, d] - q_n[at, d], 0.0)
    else:
        res = np.maximum(p_n - q_n, 0.0)
    cdf = np.cumsum(res, axis=1)
    t = u[:, 2 * k] * cdf[:, -1]
    token = np.where(cdf[:, -1] > 0, inverse_cdf(cdf, t, vocab), PLACEHOLDER)
    out = np.where(np.arange(k + 1)[None, :] < n[:, None], np.concatenate([drafts, np.zeros((batch, 1), np.int64)], 1),
                   PLACEHOLDER)
    out[rows, n] = token
    _write(output_token_ids, out)
    _write(output_accepted_token_num, np.asarray(output_accepted_token_num.cpu()) + n + later.sum(1))
    _write(output_emitted_draft_token_num, np.asarray(output_emitted_draft_token_num.cpu()) + n)


def _write(tensor, values: np.ndarray) -> None:
    import torch

    tensor.copy_(torch.from_numpy(np.asarray(values).astype(np.int32)))


def honest(**kw) -> None:
    _sample("honest", **kw)


def residual_at_draft(**kw) -> None:
    _sample("residual_at_draft", **kw)


def recovery_from_p(**kw) -> None:
    _sample("recovery_from_p", **kw)


def q_not_sampled(**kw) -> None:
    _sample("q_not_sampled", **kw)


def shared_uniform(**kw) -> None:
    _sample("shared_uniform", **kw)


BUGS = {"residual at the drafted token only": residual_at_draft, "recovery from p": recovery_from_p,
        "q not the distribution sampled": q_not_sampled, "one uniform shared across positions": shared_uniform}
