"""Torch kernels of the `output` family: vectorized, no per-request Python loop, no host sync on CUDA
outside checked mode (the draft counts are host data: they become a tensor in one copy)."""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.kernels.torch.layout import token_layout
from specverify.oracles.output import check_spec_metadata


def spec_metadata(*, num_draft_tokens, cu_num_scheduled_tokens, input_ids, **outputs):
    """See `specverify.oracles.output.spec_metadata`."""
    batch, total = check_spec_metadata(num_draft_tokens, cu_num_scheduled_tokens, input_ids, outputs,
                                       values=reads_values(cu_num_scheduled_tokens))
    if batch == 0:
        return
    device = cu_num_scheduled_tokens.device
    counts = torch.tensor(num_draft_tokens, dtype=torch.long).to(device, non_blocking=True)
    cu_draft = torch.cumsum(counts, 0)
    cu_sampled = cu_draft + torch.arange(1, batch + 1, device=device)
    sampled_start = cu_sampled - counts - 1                        # s(r)
    first = cu_num_scheduled_tokens.long() - counts - 1            # first(r): the first sampled position
    outputs["cu_num_draft_tokens"].copy_(cu_draft)
    outputs["cu_num_sampled_tokens"].copy_(cu_sampled)
    outputs["bonus_logits_indices"].copy_(cu_sampled - 1)
    request, position, _ = token_layout(cu_sampled, total + batch)
    outputs["logits_indices"].copy_(first[request] + position)
    request, position, _ = token_layout(cu_draft, total)
    outputs["target_logits_indices"].copy_(sampled_start[request] + position)
    outputs["draft_token_ids"].copy_(input_ids[first[request] + 1 + position])
