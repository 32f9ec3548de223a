"""Triton kernel of the `stop` family: one launch, a [rows, K+1] tile per program, no host sync outside
checked mode. Without stop ids the stop-id loop is compiled out (HAS_IDS)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import cdiv, launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.oracles import stop as oracle

BLOCK_ROWS = 32    # most rows per program (B = 1024: 32 programs or more)
ROW_TILE = 1024    # elements of a program's [rows, K+1] tile


@launcher
@triton.jit
def stop_kernel(tok_ptr, tok_rows, tok_cols, rejected_ptr, budget_ptr, ids_ptr, ids_rows, ids_cols, pos_ptr,
                stopped_ptr, left_ptr, batch, width, num_ids, HAS_REJECTED: tl.constexpr, HAS_IDS: tl.constexpr,
                BLOCK_B: tl.constexpr, BLOCK_W: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.arange(0, BLOCK_W)
    live = rows < batch
    tile = live[:, None] & (cols[None, :] < width)
    tok = tl.load(tok_ptr + rows[:, None].to(tl.int64) * tok_rows + cols[None, :].to(tl.int64) * tok_cols, mask=tile,
                  other=-1).to(tl.int64)
    if HAS_REJECTED:
        emitted = width - tl.load(rejected_ptr + rows, mask=live, other=0).to(tl.int64)
    else:
        emitted = width - tl.sum((tile & (tok == -1)).to(tl.int64), axis=1)
    valid = tile & (cols[None, :] < emitted[:, None])
    budget = tl.load(budget_ptr + rows, mask=live, other=0).to(tl.int64)
    hit = budget[:, None] - (cols[None, :] + 1) <= 0
    if HAS_IDS:
        at = ids_ptr + rows.to(tl.int64) * ids_rows
        for _ in range(0, num_ids):         # one pointer step per id: no w * ids_cols that could pass 2**31
            stop_id = tl.load(at, mask=live, other=-1).to(tl.int64)
            at += ids_cols
            hit = hit | ((tok == stop_id[:, None]) & (stop_id[:, None] != -1))
    first = tl.min(tl.where(valid & hit, cols[None, :], width), axis=1)
    is_stopped = first < width
    left = budget - emitted
    tl.store(pos_ptr + rows, tl.where(is_stopped, first, -1), mask=live)
    tl.store(stopped_ptr + rows, is_stopped.to(tl.uint8), mask=live)
    tl.store(left_ptr + rows, tl.where(is_stopped, tl.minimum(left, 0), left).to(left_ptr.dtype.element_ty),
             mask=live)


@prepared
def spec_stopping(*, output_token_ids, num_rejected_tokens, num_appendable, stop_ids, stop_pos, stopped,
                  new_num_appendable):
    """See `specverify.oracles.stop.spec_stopping`. Any row and column strides."""
    batch, width = validate(oracle.check_spec_stopping, output_token_ids, num_rejected_tokens, num_appendable, stop_ids,
                            stop_pos, stopped, new_num_appendable, values=reads_values(output_token_ids))
    if batch == 0:
        return
    has_ids = stop_ids is not None and stop_ids.shape[1] > 0
    ids = stop_ids if has_ids else output_token_ids          # a placeholder pointer, never read
    rejected = num_rejected_tokens.contiguous() if num_rejected_tokens is not None else num_appendable
    block_w = next_power_of_2(width)
    block_b = max(1, min(BLOCK_ROWS, ROW_TILE // block_w))
    stop_kernel[(cdiv(batch, block_b),)](
        output_token_ids, output_token_ids.stride(0), output_token_ids.stride(1), rejected,
        num_appendable.contiguous(), ids, ids.stride(0), ids.stride(1), stop_pos, stopped.view(torch.uint8),
        new_num_appendable, batch, width, ids.shape[1] if has_ids else 0,
        HAS_REJECTED=num_rejected_tokens is not None, HAS_IDS=has_ids, BLOCK_B=block_b, BLOCK_W=block_w)
