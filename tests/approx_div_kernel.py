"""A test fixture, not a production kernel: `rejection.random` in Triton with the acceptance ratio written
as a plain `/` on f32, which Triton compiles on CUDA to the approximate `div.full.f32` (within 2 ulp)
rather than the correctly rounded division the record demands (our kernel calls `tl.math.div_rn`). It
conforms under dialect `approx_div` and fails the record's rule on a uniform at the ratio (on a GPU;
the interpreter divides exactly). It validates nothing: only the valid and hazard tiers apply.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def approx_random_kernel(out_ptr, o_row, o_col, draft_ptr, bonus_ptr, target_ptr, t_row, t_v, dp_ptr, dp_row,
                         dp_v, u_ptr, rec_ptr, cu_ptr, greedy_ptr, vocab, HAS_DP: tl.constexpr,
                         BLOCK: tl.constexpr):
    """Request r: accept while q > 0 and f32 p / q (approximate) >= u, emit the recovered id at the
    first reject, the bonus after none; greedy rows untouched."""
    r = tl.program_id(0).to(tl.int64)
    end = tl.load(cu_ptr + r).to(tl.int64)
    start = tl.load(cu_ptr + r - 1, mask=r > 0, other=0).to(tl.int64)
    count = end - start
    offs = tl.arange(0, BLOCK)
    live = offs < count
    pos = start + offs
    draft = tl.load(draft_ptr + pos, mask=live, other=-1).to(tl.int64)
    valid = live & (draft >= 0) & (draft < vocab)
    safe = tl.where(valid, draft, 0)
    p = tl.load(target_ptr + pos * t_row + safe * t_v, mask=valid, other=0.0)
    if HAS_DP:
        q = tl.load(dp_ptr + pos * dp_row + safe * dp_v, mask=valid, other=0.0)
    else:
        q = tl.full([BLOCK], 1.0, tl.float32)
    ratio = p / tl.where(q > 0, q, 1.0)          # div.full.f32 on CUDA
    u = tl.load(u_ptr + pos, mask=live, other=2.0)
    accept = valid & (q > 0) & (ratio.to(tl.float64) >= u)
    first = tl.min(tl.where(live & (accept == 0), offs, BLOCK), axis=0)
    emitted = tl.where(first == BLOCK, count + 1, first + 1)
    recovered = tl.load(rec_ptr + pos, mask=live, other=0).to(tl.int64)
    bonus = tl.load(bonus_ptr + r)
    values = tl.where(offs < count, tl.where(accept, draft, recovered), bonus)
    greedy = tl.load(greedy_ptr + r)
    tl.store(out_ptr + r * o_row + offs * o_col, values.to(tl.int32), mask=offs < tl.where(greedy == 0, emitted, 0))


def random(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
           recovered_token_ids, uniform_probs, is_greedy, output_token_ids):
    """rejection.random with an approximate f32 division; one launch."""
    batch = len(cu_num_draft_tokens)
    if batch == 0:
        return
    dp = target_probs if draft_probs is None else draft_probs
    approx_random_kernel[(batch,)](
        output_token_ids, output_token_ids.stride(0), output_token_ids.stride(1), draft_token_ids,
        bonus_token_ids, target_probs, target_probs.stride(0), target_probs.stride(1), dp, dp.stride(0),
        dp.stride(1), uniform_probs, recovered_token_ids, cu_num_draft_tokens, is_greedy.view(torch.uint8),
        target_probs.shape[-1], HAS_DP=draft_probs is not None, BLOCK=triton.next_power_of_2(max_spec_len + 1))
