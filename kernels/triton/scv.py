"""Triton kernel of the `scv` family: one launch, no host sync outside checked mode.

Programs 0..B-1 each walk one request's drafts in order, a tile at a time, carrying the first rejected
position found so far; a token is accepted when it lies before it (a later tile cannot move it
earlier). The programs after them clear the mask past the batch's drafts (CUDA-graph padding).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import cdiv, launcher
from specverify.kernels.triton.prepared import prepared
from specverify.oracles import scv as oracle

BLOCK = 256   # tokens per tile


@launcher
@triton.jit
def acceptance_kernel(draft_ptr, draft_stride, target_ptr, target_stride, cu_ptr, mask_ptr, count_ptr, batch,
                      tokens, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    if pid < batch:
        start = tl.load(cu_ptr + pid - 1, mask=pid > 0, other=0).to(tl.int64)
        n = tl.load(cu_ptr + pid).to(tl.int64) - start
        first = n
        for c0 in range(0, n, BLOCK):
            pos = c0 + lanes
            inside = pos < n
            draft = tl.load(draft_ptr + (start + pos) * draft_stride, mask=inside, other=0).to(tl.int64)
            target = tl.load(target_ptr + (start + pos) * target_stride, mask=inside, other=0).to(tl.int64)
            rejected = inside & ((draft == -1) | (draft != target))
            first = tl.minimum(first, tl.min(tl.where(rejected, pos, n), axis=0))
            tl.store(mask_ptr + start + pos, (pos < first).to(tl.uint8), mask=inside)
        tl.store(count_ptr + pid, first.to(tl.int32))
    else:
        drafts = tl.load(cu_ptr + batch - 1, mask=batch > 0, other=0).to(tl.int64)
        index = (pid - batch).to(tl.int64) * BLOCK + lanes
        tl.store(mask_ptr + index, tl.zeros([BLOCK], tl.uint8), mask=(index >= drafts) & (index < tokens))


@prepared
def acceptance_mask(*, draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted):
    """See `specverify.oracles.scv.acceptance_mask`. Token arrays of any stride."""
    batch, tokens = validate(oracle.check_acceptance_mask, draft_token_ids, target_token_ids, cu_num_draft_tokens,
                             accepted_mask, num_accepted, values=reads_values(cu_num_draft_tokens))
    programs = batch + cdiv(tokens, BLOCK)
    if programs == 0:
        return
    acceptance_kernel[(programs,)](draft_token_ids, draft_token_ids.stride(0), target_token_ids,
                                   target_token_ids.stride(0), cu_num_draft_tokens.contiguous(),
                                   accepted_mask.view(torch.uint8), num_accepted, batch, tokens, BLOCK=BLOCK)
