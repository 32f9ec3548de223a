"""Torch kernel of the `scv` family: the acceptance mask of a flattened batch, vectorized (no
per-request loop, no host sync on CUDA outside checked mode: sizes come from shapes only)."""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.oracles import scv as oracle


def acceptance_mask(*, draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted):
    """See `specverify.oracles.scv.acceptance_mask`. Each request's first rejected position is a
    scatter-min over its tokens; a token is accepted when it lies before that position."""
    batch, tokens = oracle.check_acceptance_mask(draft_token_ids, target_token_ids, cu_num_draft_tokens,
                                                 accepted_mask, num_accepted,
                                                 values=reads_values(cu_num_draft_tokens))
    if batch == 0:   # every token is padding
        accepted_mask.fill_(False)
        return
    device = draft_token_ids.device
    cu = cu_num_draft_tokens.long()
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    index = torch.arange(tokens, device=device)
    request = torch.searchsorted(cu, index, right=True)        # B for the padding past cu[B-1]
    owned = request < batch
    row = request.clamp(max=batch - 1)
    position = index - (cu - counts)[row]
    draft = draft_token_ids.long()
    rejected = (draft == oracle.PLACEHOLDER) | (draft != target_token_ids.long())
    first = counts.clone()   # no rejection: every draft accepted
    first.scatter_reduce_(0, row, torch.where(rejected & owned, position, counts[row]), "amin")
    num_accepted.copy_(first)
    accepted_mask.copy_(owned & (position < first[row]))
