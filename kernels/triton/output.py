"""Triton kernels of the `output` family: one launch per call."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.oracles.output import SPEC_METADATA_OUTPUTS, check_spec_metadata


@launcher
@triton.jit
def spec_metadata_kernel(counts_ptr, cu_sched_ptr, input_ids_ptr, cu_draft_ptr, cu_sampled_ptr, logits_ptr,
                         target_ptr, bonus_ptr, draft_ptr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per request; each sums the draft counts before its own (B is at most a few thousand)."""
    r = tl.program_id(0)
    offs_b = tl.arange(0, BLOCK_B)
    drafts_before = tl.sum(tl.load(counts_ptr + offs_b, mask=offs_b < r, other=0), axis=0)   # d(r)
    sampled_before = drafts_before + r                                                       # s(r)
    n = tl.load(counts_ptr + r)
    first = tl.load(cu_sched_ptr + r) - n - 1
    tl.store(cu_draft_ptr + r, drafts_before + n)
    tl.store(cu_sampled_ptr + r, sampled_before + n + 1)
    tl.store(bonus_ptr + r, sampled_before + n)
    offs = tl.arange(0, BLOCK_N)
    tl.store(logits_ptr + sampled_before + offs, first + offs, mask=offs <= n)
    drafts = offs < n
    tl.store(target_ptr + drafts_before + offs, sampled_before + offs, mask=drafts)
    ids = tl.load(input_ids_ptr + first + 1 + offs, mask=drafts, other=0)
    tl.store(draft_ptr + drafts_before + offs, ids, mask=drafts)


@prepared
def spec_metadata(*, num_draft_tokens, cu_num_scheduled_tokens, input_ids, **outputs):
    """See `specverify.oracles.output.spec_metadata`. Outputs must be contiguous."""
    batch, _ = validate(check_spec_metadata, num_draft_tokens, cu_num_scheduled_tokens, input_ids, outputs,
                        values=reads_values(cu_num_scheduled_tokens))
    for name, out in outputs.items():
        if not out.is_contiguous():
            raise ValueError(f"{name}: the Triton kernel writes contiguous outputs only")
    if batch == 0:
        return
    device = cu_num_scheduled_tokens.device
    counts = torch.tensor(num_draft_tokens, dtype=torch.int32).to(device, non_blocking=True)
    spec_metadata_kernel[(batch,)](
        counts, cu_num_scheduled_tokens.contiguous(), input_ids.contiguous(), *(outputs[name] for name in SPEC_METADATA_OUTPUTS),
        BLOCK_B=next_power_of_2(batch), BLOCK_N=next_power_of_2(max(num_draft_tokens) + 1))
