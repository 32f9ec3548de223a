"""The next token of each request after verification, as this engine's sampler hands it over."""
import torch


def next_token_padded(*, sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size, next_token_ids,
                      valid_sampled_tokens_count):
    """The count of valid ids per row and the rightmost one (the backup when none, or the row is
    discarded). The engine's sampled ids are a contiguous [B, K+1] tensor, so rows are read through their
    row stride with unit column step."""
    rows, width = sampled_token_ids.shape
    if rows == 0:
        return
    ids = torch.as_strided(sampled_token_ids, (rows, width), (sampled_token_ids.stride(0), 1))
    valid = (ids >= 0) & (ids < vocab_size)
    count = valid.sum(1)
    last = torch.where(valid, torch.arange(width, device=ids.device), -1).amax(1) if width else count - 1
    found = ids.gather(1, last.clamp(min=0)[:, None])[:, 0] if width else backup_next_token_ids
    keep = (count > 0) & ~discard_mask
    next_token_ids.copy_(torch.where(keep, found, backup_next_token_ids))
    valid_sampled_tokens_count.copy_(torch.where(discard_mask, 0, count))
