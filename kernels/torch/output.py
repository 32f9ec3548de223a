"""Torch kernels of the `output` family: vectorized, no per-request Python loop, no host sync on CUDA
outside checked mode. The draft counts are host data: everything that depends on them alone is
computed on the host and reaches the device in one copy."""
from __future__ import annotations

import numpy as np
import torch

from specverify.kernels.validation import reads_values
from specverify.oracles.output import check_spec_metadata


def spec_metadata(*, num_draft_tokens, cu_num_scheduled_tokens, input_ids, **outputs):
    """See `specverify.oracles.output.spec_metadata`. Launches: the one host-to-device copy, four
    copies out of it, then one gather of the scheduled offsets for every logits slot and draft, and
    one add and one gather of the input ids."""
    batch, total = check_spec_metadata(num_draft_tokens, cu_num_scheduled_tokens, input_ids, outputs,
                                       values=reads_values(cu_num_scheduled_tokens))
    if batch == 0:
        return
    counts = np.asarray(num_draft_tokens, dtype=np.int64)
    requests = np.arange(batch)
    cu_draft = np.cumsum(counts)
    cu_sampled = cu_draft + requests + 1
    start = cu_sampled - counts - 1                   # request r's first logits slot
    of_slot = np.repeat(requests, counts + 1)         # logits slot i: cu_sched[r] - n - 1 + (i - start)
    slot_offset = np.arange(total + batch) - start[of_slot] - counts[of_slot] - 1
    of_draft = np.repeat(requests, counts)            # draft k at position p: input id cu_sched[r] - n + p
    position = np.arange(total) - (cu_draft - counts)[of_draft]
    host = np.concatenate((cu_draft, cu_sampled, cu_sampled - 1, start[of_draft] + position,
                           of_slot, of_draft, slot_offset, position - counts[of_draft]))
    packed = torch.from_numpy(host).to(cu_num_scheduled_tokens.device, non_blocking=True)
    parts = torch.split(packed, (batch, batch, batch, total, total + batch + total, total + batch, total))
    cu_draft_, cu_sampled_, bonus, target, owners, slot_offsets, draft_offsets = parts
    outputs["cu_num_draft_tokens"].copy_(cu_draft_)
    outputs["cu_num_sampled_tokens"].copy_(cu_sampled_)
    outputs["bonus_logits_indices"].copy_(bonus)
    outputs["target_logits_indices"].copy_(target)
    scheduled = cu_num_scheduled_tokens[owners]
    torch.add(scheduled[:total + batch], slot_offsets, out=outputs["logits_indices"])
    torch.index_select(input_ids, 0, scheduled[total + batch:] + draft_offsets, out=outputs["draft_token_ids"])
