"""Triton kernel of `rejection.chain_cdf`: one launch, one program per request.

A program decides all K drafts at once (one vector of K + 1 lanes), finds its first rejection, then
sweeps the one row it picks from in tiles of up to BLOCK_V: once for the total, once for the running
sum (`tl.cumsum` per tile plus the carried sum of the tiles before), keeping the first cell whose
running sum exceeds t = u_final * total. A row that fits one tile is loaded once (ONE_TILE). Every offset is int64, so rows past 2**31 elements are
addressed correctly.
"""
from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.oracles.rejection_cdf import check_chain_cdf

BLOCK_V = 1024     # the widest vocabulary tile


@triton.jit
def residual_tile(p_row, q_row, t_v, q_v, v, vocab, q_end, Q_RANGE: tl.constexpr):
    """One tile of the pick row: max(p - q', 0) with NaN as 0 where q_end == vocab (a rejection: the
    draft row is read), p as it stands where q_end == 0."""
    p = tl.load(p_row + v * t_v, mask=v < vocab, other=0.0)
    q = tl.load(q_row + v * q_v, mask=v < q_end, other=0.0)
    if Q_RANGE:
        kept = (q >= 0) & (q <= 1.0)
    else:
        kept = q == q
    diff = p - tl.where(kept, q, 0.0)
    res = tl.where(diff > 0, diff, 0.0)
    return tl.where(q_end > 0, res, p)


@launcher
@triton.jit
def chain_cdf_kernel(pred_ptr, idx_ptr, idx_row, idx_col, num_ptr, num_stride, cand_ptr, c_row, c_col,
                     target_ptr, t_b, t_pos, t_v, draft_ptr, q_b, q_pos, q_v, u_ptr, u_b, u_pos, uf_ptr, uf_stride,
                     k, vocab, Q_RANGE: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK: tl.constexpr,
                     ONE_TILE: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    slot = tl.arange(0, BLOCK_K)
    live = slot < k
    draft = tl.load(cand_ptr + b * c_row + (slot + 1) * c_col, mask=live, other=-1)
    valid = live & (draft >= 0) & (draft < vocab)
    safe = tl.where(valid, draft, 0)
    p = tl.load(target_ptr + b * t_b + slot * t_pos + safe * t_v, mask=valid, other=0.0)
    q = tl.load(draft_ptr + b * q_b + slot * q_pos + safe * q_v, mask=valid, other=0.0)
    u = tl.load(u_ptr + b * u_b + slot * u_pos, mask=live, other=1.0)
    accept = valid & (u * q < p)
    if Q_RANGE:
        accept = accept & (q > 0) & (q <= 1.0)
    num = tl.min(tl.where(live & (accept == 0), slot, k), axis=0).to(tl.int64)
    q_end = tl.where(num < k, vocab, 0)
    p_row = target_ptr + b * t_b + num * t_pos
    q_row = draft_ptr + b * q_b + tl.minimum(num, k - 1) * q_pos
    if ONE_TILE:                          # the row fits one tile: load it once
        v = tl.arange(0, BLOCK).to(tl.int64)
        res = residual_tile(p_row, q_row, t_v, q_v, v, vocab, q_end, Q_RANGE)
        sums = tl.cumsum(res, axis=0)
        t = tl.load(uf_ptr + b * uf_stride) * tl.sum(res, axis=0)
        found = tl.min(tl.where((v < vocab) & (sums > t) & (res > 0), v, vocab), axis=0)
    else:
        total = 0.0
        for s in range(0, vocab, BLOCK):
            v = s + tl.arange(0, BLOCK).to(tl.int64)
            total += tl.sum(residual_tile(p_row, q_row, t_v, q_v, v, vocab, q_end, Q_RANGE), axis=0)
        t = tl.load(uf_ptr + b * uf_stride) * total
        carry = total * 0.0
        found = tl.full([], 0, tl.int64) + vocab
        for s in range(0, vocab, BLOCK):
            v = s + tl.arange(0, BLOCK).to(tl.int64)
            res = residual_tile(p_row, q_row, t_v, q_v, v, vocab, q_end, Q_RANGE)
            sums = tl.cumsum(res, axis=0) + carry
            found = tl.minimum(found, tl.min(tl.where((v < vocab) & (sums > t) & (res > 0), v, vocab), axis=0))
            carry += tl.sum(res, axis=0)
    token = tl.where(found < vocab, found, vocab - 1)
    written = slot <= num
    base = b * (k + 1)
    tl.store(pred_ptr + base + slot, tl.where(slot < num, draft, token).to(tl.int32), mask=written)
    tl.store(idx_ptr + b * idx_row + slot * idx_col, (base + slot).to(tl.int32), mask=written)
    tl.store(num_ptr + b * num_stride, num.to(tl.int32))


@prepared
def chain_cdf(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
              accept_token_num, q_range: bool = True):
    """See `specverify.oracles.rejection_cdf.chain_cdf` (`q_range` False: dialect `snapshot`). One launch."""
    batch, k, vocab = validate(check_chain_cdf, candidates, target_probs, draft_probs, uniform_samples,
                               uniform_final, predicts, accept_index, accept_token_num,
                               values=reads_values(candidates))
    if batch == 0:
        return
    chain_cdf_kernel[(batch,)](
        predicts, accept_index, *accept_index.stride(), accept_token_num, accept_token_num.stride(0),
        candidates, *candidates.stride(), target_probs, *target_probs.stride(), draft_probs, *draft_probs.stride(),
        uniform_samples, *uniform_samples.stride(), uniform_final, uniform_final.stride(0), k, vocab,
        Q_RANGE=q_range, BLOCK_K=next_power_of_2(k + 1), BLOCK=min(BLOCK_V, next_power_of_2(vocab)),
        ONE_TILE=vocab <= BLOCK_V)


def chain_cdf_snapshot(**fields) -> None:
    """`chain_cdf` under dialect `snapshot`. One launch."""
    chain_cdf(**fields, q_range=False)
