"""Torch kernel of the `stop` family: vectorized over the [B, K+1, W] tile, no per-request loop, no host
sync on CUDA outside checked mode. With no stop ids it does no stop-id work at all."""
from __future__ import annotations

import torch

from specverify.kernels.validation import reads_values
from specverify.kernels.torch.layout import iota, scalar
from specverify.oracles import stop as oracle


def first_stop_hit(tokens: torch.Tensor, stop_ids: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    """[B]: min(1 + the first column whose token is one of its row's stop ids, budget). The columns are
    counted in the budget's dtype: a `where` of mixed dtypes casts one operand first on CUDA (a copy)."""
    match = tokens[:, :, None] == stop_ids[:, None, :]
    key = torch.where(match, iota(tokens.shape[1] + 1, tokens, budget.dtype)[1:, None], budget[:, None, None])
    return key.amin(dim=(1, 2))


def spec_stopping(*, output_token_ids, num_rejected_tokens, num_appendable, stop_ids, stop_pos, stopped,
                  new_num_appendable):
    """See `specverify.oracles.stop.spec_stopping`. One row min of a 1-based key gives the first stop:
    column i + 1 where the token is a stop id of its row, else A (the length cap hits at i + 1 >= A).
    A -1 column matching -1 stop-id padding lies past the emitted prefix (rows are a prefix then -1), so
    its key exceeds `emitted` and never stops the row."""
    batch, width = oracle.check_spec_stopping(output_token_ids, num_rejected_tokens, num_appendable, stop_ids,
                                              stop_pos, stopped, new_num_appendable,
                                              values=reads_values(output_token_ids))
    if batch == 0:
        return
    tokens, budget = output_token_ids, num_appendable
    if num_rejected_tokens is None:
        # counted in int64 (a bool sum would cast its input first: a launch)
        emitted = torch.ne(tokens, oracle.PLACEHOLDER, out=torch.empty(tokens.shape, device=tokens.device,
                                                                        dtype=torch.long)).sum(dim=1)
    else:
        emitted = width - num_rejected_tokens
    first = budget
    if stop_ids is not None and stop_ids.shape[1] > 0:
        first = first_stop_hit(tokens, stop_ids, budget)
    first = first.clamp(min=1)                           # 1-based: a budget <= 0 stops at the first token
    torch.le(first, emitted, out=stopped)
    torch.addcmul(scalar(-1, first), first, stopped, out=stop_pos)          # first - 1, or -1
    left = torch.sub(budget, emitted, out=new_num_appendable)
    torch.where(stopped, left.clamp(max=0), left, out=new_num_appendable)
