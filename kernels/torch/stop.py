"""Torch kernel of the `stop` family: vectorized over the [B, K+1] tile, no per-request loop, no host
sync on CUDA outside checked mode. With no stop ids it does no stop-id work at all."""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.oracles import stop as oracle


def stop_hits(tokens: torch.Tensor, stop_ids: torch.Tensor) -> torch.Tensor:
    """[B, K+1]: is the token one of its own row's stop ids (-1 padding never matches)."""
    ids = stop_ids.long()[:, None, :]
    return ((tokens.long()[:, :, None] == ids) & (ids != oracle.PLACEHOLDER)).any(dim=2)


def spec_stopping(*, output_token_ids, num_rejected_tokens, num_appendable, stop_ids, stop_pos, stopped,
                  new_num_appendable):
    """See `specverify.oracles.stop.spec_stopping`."""
    batch, width = oracle.check_spec_stopping(output_token_ids, num_rejected_tokens, num_appendable, stop_ids,
                                              stop_pos, stopped, new_num_appendable,
                                              values=reads_values(output_token_ids))
    tokens = output_token_ids
    cols = torch.arange(width, device=tokens.device)
    if num_rejected_tokens is None:   # a prefix then -1: the -1 entries are the rejected ones
        emitted = width - (tokens == oracle.PLACEHOLDER).sum(dim=1)
    else:
        emitted = width - num_rejected_tokens.long()
    valid = cols[None, :] < emitted[:, None]
    budget = num_appendable.long()
    hit = budget[:, None] - (cols[None, :] + 1) <= 0
    if stop_ids is not None and stop_ids.shape[1] > 0:
        hit |= stop_hits(tokens, stop_ids)
    first = torch.where(valid & hit, cols[None, :], width).amin(dim=1)
    is_stopped = first < width
    left = budget - emitted
    stop_pos.copy_(torch.where(is_stopped, first, -1))
    stopped.copy_(is_stopped)
    new_num_appendable.copy_(torch.where(is_stopped, left.clamp(max=0), left))
