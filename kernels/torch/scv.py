"""Torch kernel of the `scv` family: the acceptance mask of a flattened batch, vectorized (no
per-request loop, no host sync on CUDA outside checked mode: sizes come from shapes only)."""
from __future__ import annotations

import torch

from specverify.kernels.validation import reads_values
from specverify.kernels.torch.layout import constant, iota, scalar
from specverify.oracles import scv as oracle


def acceptance_mask(*, draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted):
    """See `specverify.oracles.scv.acceptance_mask`. One scatter-min gives each request's first
    rejected token (its end when none); a token is accepted when it lies before its request's. One
    buffer holds [cu..., cu[B-1]] (where the scatter-min starts; the extra entry takes the padding
    tokens past cu[B-1]) and then the requests' starts [0, cu[:B-1]...]."""
    batch, tokens = oracle.check_acceptance_mask(draft_token_ids, target_token_ids, cu_num_draft_tokens,
                                                 accepted_mask, num_accepted,
                                                 values=reads_values(cu_num_draft_tokens))
    if batch == 0:   # every token is padding
        accepted_mask.fill_(False)
        return
    cu = cu_num_draft_tokens
    index = iota(tokens, cu, cu.dtype)
    request = torch.searchsorted(cu, index, right=True)        # B for the padding past cu[B-1]
    zero = constant("zero_int32", cu)
    bounds = torch.cat((cu, cu[-1:], zero, cu[:-1]))
    first, starts = bounds[:batch + 1], bounds[batch + 1:]
    draft = draft_token_ids
    rejected = (draft != target_token_ids) | (draft == oracle.PLACEHOLDER)
    first.scatter_reduce_(0, request, torch.where(rejected, index, scalar(2**31 - 1, cu, cu.dtype)), "amin")
    torch.lt(index, first[request], out=accepted_mask)
    torch.sub(first[:batch], starts, out=num_accepted)
