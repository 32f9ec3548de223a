"""Torch kernel of `rejection.chain_cdf`: vectorized over requests, no host sync outside checked mode.

Acceptance is decided for every draft at once ([B, K] gathers of p and q at the drafts); the first
rejection of each row selects the one row of V per request the pick reads (the residual row, or p_K),
which is gathered, cleaned in place (`pick_rows`), scanned by one cumsum and searched. Only the emitted
slots are written.
"""
from __future__ import annotations

import torch

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.torch.layout import constant, iota, scalar
from specverify.oracles.rejection_cdf import check_chain_cdf


def accepted_drafts(candidates, target_probs, draft_probs, uniform_samples, q_range: bool) -> torch.Tensor:
    """[B, K] bool: the draft is an id in [0, V), f32(u * q) < p and (q_range) 0 < q <= 1. -1 and
    out-of-vocabulary drafts are rejected; their cells are never gathered (a safe index stands in)."""
    k, vocab = draft_probs.shape[1], target_probs.shape[-1]
    drafts = candidates[:, 1:]
    valid = (drafts >= 0) & (drafts < vocab)
    safe = torch.where(valid, drafts, scalar(0, drafts, drafts.dtype))[..., None]
    p = target_probs[:, :k].gather(-1, safe)[..., 0]
    q = draft_probs.gather(-1, safe)[..., 0]
    accepted = valid & (uniform_samples[:, :k] * q < p)
    return accepted & (q > 0) & (q <= 1) if q_range else accepted


def pick_rows(target_probs, draft_probs, num, q_range: bool) -> torch.Tensor:
    """[B, V] f32: each request's residual at its first rejected position num (p as it stands when
    num == K): max(p - q', 0) with a NaN difference as 0; q' = q where 0 <= q <= 1 else 0 (q_range),
    or q with only NaN zeroed. Four passes on the gathered draft row, each in place: q' by a NaN-dropping
    max with 0 (for q_range) and a select of q <= hi (NaN and what is out of range fail it; hi = NaN for
    the rows whose K drafts were all accepted, so their q' is 0 and p - 0 is p), the difference, and a
    NaN-dropping max with lo (0, or NaN for those rows: fmax(x, NaN) is x, so p stands)."""
    batch, k = draft_probs.shape[:2]
    rows = iota(batch, num)
    p = target_probs[rows, num]
    if k == 0:
        return p
    q = draft_probs[rows, num.clamp(max=k - 1)]
    rejected = (num < k)[:, None]
    zero, nan = scalar(0.0, q, q.dtype), constant("nan_float32", q)
    if q_range:
        torch.fmax(q, zero, out=q)
    hi = torch.where(rejected, scalar(1.0, q, q.dtype) if q_range else constant("inf_float32", q), nan)
    torch.where(q <= hi, q, zero, out=q)
    torch.sub(p, q, out=q)
    return torch.fmax(q, torch.where(rejected, zero, nan), out=q)


def first_crossing(res, u_final) -> torch.Tensor:
    """[B] int64: the lowest v whose running sum exceeds t = f32(u_final * total) (and whose cell is
    positive, which the exact contract implies), V - 1 when none does."""
    sums = res.cumsum(-1)
    t = u_final * sums[:, -1]
    hits = torch.gt(sums, t[:, None]).logical_and_(res > 0)
    first = hits.view(torch.uint8).argmax(-1)
    found = hits[iota(res.shape[0], first), first]
    return torch.where(found, first, res.shape[-1] - 1)


def chain_cdf(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
              accept_token_num, q_range: bool = True):
    """See `specverify.oracles.rejection_cdf.chain_cdf` (`q_range` False: dialect `snapshot`)."""
    batch, k, _ = validate(check_chain_cdf, candidates, target_probs, draft_probs, uniform_samples, uniform_final,
                           predicts, accept_index, accept_token_num, values=reads_values(candidates))
    if batch == 0:
        return
    accepted = accepted_drafts(candidates, target_probs, draft_probs, uniform_samples, q_range)
    stop = torch.cat((accepted, accepted.new_zeros((batch, 1))), 1)     # slot K is never accepted
    num = stop.to(torch.uint8).argmin(-1)
    token = first_crossing(pick_rows(target_probs, draft_probs, num, q_range), uniform_final)
    slots = iota(k + 1, num)
    written = slots <= num[:, None]
    values = torch.where(slots < num[:, None], torch.roll(candidates, -1, 1), token[:, None])
    grid = predicts.view(batch, k + 1)
    torch.where(written, values.to(torch.int32), grid, out=grid)
    flat = iota(batch, num)[:, None] * (k + 1) + slots
    torch.where(written, flat.to(torch.int32), accept_index, out=accept_index)
    accept_token_num.copy_(num)


def chain_cdf_snapshot(**fields) -> None:
    """`chain_cdf` under dialect `snapshot`."""
    chain_cdf(**fields, q_range=False)
