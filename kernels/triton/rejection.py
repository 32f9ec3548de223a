"""Triton kernels of the `rejection` family: one launch per call."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from specverify.kernels.checks import reads_values
from specverify.oracles.rejection import check_greedy


@triton.jit
def request_span(cu_ptr, r):
    """[start, end) of request r's draft tokens, from inclusive offsets."""
    start = tl.load(cu_ptr + r - 1, mask=r > 0, other=0)
    end = tl.load(cu_ptr + r)
    return start, end


@triton.jit
def greedy_kernel(out_ptr, out_row_stride, draft_ptr, argmax_ptr, bonus_ptr, cu_ptr, is_greedy_ptr,
                  ALL_GREEDY: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    start, end = request_span(cu_ptr, r)
    count = end - start
    offs = tl.arange(0, BLOCK)
    live = offs < count
    draft = tl.load(draft_ptr + start + offs, mask=live, other=0).to(tl.int64)
    argmax = tl.load(argmax_ptr + start + offs, mask=live, other=0)
    # the last position the row emits: its first rejected draft (BLOCK: none), -1 for a non-greedy row
    last = tl.min(tl.where(live & (draft != argmax), offs, BLOCK), axis=0)
    if not ALL_GREEDY:
        last = tl.where(tl.load(is_greedy_ptr + r) != 0, last, -1)
    row = out_ptr + r.to(tl.int64) * out_row_stride
    tl.store(row + offs, argmax.to(tl.int32), mask=live & (offs <= last))
    bonus = tl.load(bonus_ptr + r)
    tl.store(row + count, bonus.to(tl.int32), mask=last == BLOCK)


def greedy(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
           max_spec_len, output_token_ids):
    """See `specverify.oracles.rejection.greedy`. One program per request."""
    batch = check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                         max_spec_len, output_token_ids, values=reads_values(cu_num_draft_tokens))
    if batch == 0:
        return
    greedy_kernel[(batch,)](
        output_token_ids, output_token_ids.stride(0), draft_token_ids.contiguous(), target_argmax.contiguous(),
        bonus_token_ids.contiguous(), cu_num_draft_tokens.contiguous(),
        is_greedy.contiguous().view(torch.uint8) if is_greedy is not None else cu_num_draft_tokens,
        ALL_GREEDY=is_greedy is None, BLOCK=triton.next_power_of_2(max(max_spec_len, 1)))
