"""Pieces every family's Torch kernels share: the flattened-batch layout and a sync-free masked store."""
from __future__ import annotations

import torch


def token_layout(cu_num_draft_tokens: torch.Tensor, num_tokens: int):
    """For every token of a flattened batch (inclusive offsets): its request and its position within the
    request; and per request its count."""
    cu = cu_num_draft_tokens.long()
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    tokens = torch.arange(num_tokens, device=cu.device)
    request = torch.searchsorted(cu, tokens, right=True)
    position = tokens - (cu - counts)[request]
    return request, position, counts


def masked_store(out: torch.Tensor, mask: torch.Tensor, values: torch.Tensor) -> None:
    """out[mask] = values[mask] without a host sync: the masked values are packed in mask order into a
    scratch row (unmasked ones land in its spare last slot), then scattered with `masked_scatter_`.
    CUDA's masked_scatter_ rewrites unmasked elements with their own value, which canonicalizes bool
    bytes: pass bool buffers as `.view(torch.uint8)`."""
    flat_mask = mask.reshape(-1)
    order = torch.cumsum(flat_mask, 0) - 1
    spare = flat_mask.numel()
    packed = out.new_empty(spare + 1)
    packed.scatter_(0, torch.where(flat_mask, order, spare), values.reshape(-1).to(out.dtype))
    out.masked_scatter_(mask, packed)
