"""Torch kernels of the `rejection` family: vectorized, no per-request Python loop, no host sync
on CUDA outside checked mode."""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.oracles.rejection import check_greedy


def token_layout(cu_num_draft_tokens: torch.Tensor, num_tokens: int):
    """For every draft token: its request, its position within the request; and per request its count."""
    cu = cu_num_draft_tokens.long()
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    tokens = torch.arange(num_tokens, device=cu.device)
    request = torch.searchsorted(cu, tokens, right=True)
    position = tokens - (cu - counts)[request]
    return request, position, counts


def masked_store(out: torch.Tensor, mask: torch.Tensor, values: torch.Tensor) -> None:
    """out[mask] = values[mask], writing nothing else and without a host sync: the masked values are
    packed in mask order into a scratch row (unmasked ones land in its spare last slot), then scattered."""
    flat_mask = mask.reshape(-1)
    order = torch.cumsum(flat_mask, 0) - 1
    spare = flat_mask.numel()
    packed = out.new_empty(spare + 1)
    packed.scatter_(0, torch.where(flat_mask, order, spare), values.reshape(-1).to(out.dtype))
    out.masked_scatter_(mask, packed)


def greedy(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
           max_spec_len, output_token_ids):
    """See `specverify.oracles.rejection.greedy`."""
    batch = check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                         max_spec_len, output_token_ids, values=reads_values(cu_num_draft_tokens))
    if batch == 0:
        return
    out = output_token_ids
    request, position, counts = token_layout(cu_num_draft_tokens, draft_token_ids.shape[0])
    mismatch = draft_token_ids.long() != target_argmax
    never = max_spec_len + 1
    first = torch.full((batch,), never, dtype=torch.long, device=out.device)
    first.scatter_reduce_(0, request, torch.where(mismatch, position, never), "amin")
    greedy_rows = torch.ones(batch, dtype=torch.bool, device=out.device) if is_greedy is None else is_greedy
    # emitted drafts: every position up to the first mismatch (inclusive) of a greedy row
    emit = torch.zeros(out.shape, dtype=torch.bool, device=out.device)
    values = torch.zeros(out.shape, dtype=torch.long, device=out.device)
    keep = (position <= first[request]) & greedy_rows[request]
    emit[request, position] = keep
    values[request, position] = target_argmax
    # the bonus follows a fully accepted row
    rows = torch.arange(batch, device=out.device)
    emit[rows, counts] = (first == never) & greedy_rows
    values[rows, counts] = bonus_token_ids
    masked_store(out, emit, values)
