"""Outside kernels of `scv.acceptance_mask` whose token offsets are formed in narrow or wide integers (for the
`wide-offsets` check). Triton: `int32_offsets` multiplies an int32 token index by the stride, as a kernel that
never saw a tensor past 2**31 elements does; `int64_offsets` widens the index first. Torch, for the CPU tests
that lower the wide offset to 2**16: `int16_offsets_torch` and `int64_offsets_torch`, the same mistake and its
fix one size down. Each is right on every small layout."""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def accepted_prefix(draft_ptr, draft_stride, target_ptr, target_stride, cu_ptr, mask_ptr, count_ptr,
                    WIDE: tl.constexpr):
    b = tl.program_id(0)
    start = tl.load(cu_ptr + b - 1, mask=b > 0, other=0)
    end = tl.load(cu_ptr + b)
    if WIDE:
        start = start.to(tl.int64)
        end = end.to(tl.int64)
    alive = 1
    count = 0
    for t in range(start, end):
        draft = tl.load(draft_ptr + t * draft_stride).to(tl.int64)
        target = tl.load(target_ptr + t * target_stride).to(tl.int64)
        alive = alive * ((draft == target) & (draft != -1)).to(tl.int32)
        tl.store(mask_ptr + t, alive.to(tl.uint8))
        count += alive
    tl.store(count_ptr + b, count)


def accepted(draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted, wide):
    accepted_mask.fill_(False)
    batch = cu_num_draft_tokens.shape[0]
    if batch:
        accepted_prefix[(batch,)](draft_token_ids, draft_token_ids.stride(0), target_token_ids,
                                  target_token_ids.stride(0), cu_num_draft_tokens.contiguous(),
                                  accepted_mask.view(torch.uint8), num_accepted, WIDE=wide)


def int32_offsets(*, draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted):
    accepted(draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted, False)


def int64_offsets(*, draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted):
    accepted(draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted, True)


def read_rows(x: torch.Tensor, index_dtype: torch.dtype) -> torch.Tensor:
    """x [T] read through its storage at storage_offset + t * stride, the product formed in `index_dtype`."""
    flat = x.as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
    steps = torch.arange(x.shape[0], dtype=index_dtype, device=x.device) * x.stride(0)
    return flat[x.storage_offset() + steps.long()]


def prefix_torch(draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted, index_dtype):
    """The contract on the host, over token arrays read by `read_rows`."""
    draft = read_rows(draft_token_ids, index_dtype).long().cpu()
    target = read_rows(target_token_ids, index_dtype).long().cpu()
    ends = cu_num_draft_tokens.long().cpu().tolist()
    mask = torch.zeros(accepted_mask.shape, dtype=torch.bool)
    counts = torch.zeros(num_accepted.shape, dtype=torch.int32)
    for b, end in enumerate(ends):
        for t in range(ends[b - 1] if b else 0, end):
            if draft[t] == -1 or draft[t] != target[t]:
                break
            mask[t] = True
            counts[b] += 1
    accepted_mask.copy_(mask)
    num_accepted.copy_(counts)


def int16_offsets_torch(*, draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted):
    prefix_torch(draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted, torch.int16)


def int64_offsets_torch(*, draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted):
    prefix_torch(draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted, torch.int64)
