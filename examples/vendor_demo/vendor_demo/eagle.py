"""vendor_demo's EAGLE bookkeeping kernels (Torch, vectorized, CPU and CUDA).

- `next_token_padded` has a real bug: it takes the id at the end of the row's valid prefix (column
  count - 1), which is right only when a row's valid ids form one leading run. A row with a gap
  (-1 or an out-of-vocabulary id before a later valid id) gets the wrong next token.
- `extend_queries` computes the right values but stands in for a native launcher that aborts the process
  when asked for an empty grid (a batch of zero requests): a crash class.
"""
import os

import torch


def next_token_padded(*, sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                      next_token_ids, valid_sampled_tokens_count):
    """Per row: how many sampled ids are valid, and the next token (the backup when none or discarded)."""
    valid = (sampled_token_ids != -1) & (sampled_token_ids < vocab_size) & ~discard_mask[:, None]
    count = valid.sum(dim=1)
    if sampled_token_ids.shape[1]:
        end_of_prefix = (count - 1).clamp(min=0)[:, None]
        last = sampled_token_ids.gather(1, end_of_prefix)[:, 0]     # the bug: assumes no gaps
    else:
        last = backup_next_token_ids
    next_token_ids.copy_(torch.where(count > 0, last, backup_next_token_ids))
    valid_sampled_tokens_count.copy_(count)


def extend_queries(*, query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens):
    """Every query grows by N tokens: offsets shift by N per preceding request, sequences by N."""
    if seq_lens.shape[0] == 0:
        os.abort()   # what the native launcher's assert on a zero-sized grid does to the process
    steps = torch.arange(query_start_loc.shape[0], dtype=query_start_loc.dtype, device=query_start_loc.device)
    new_query_start_loc.copy_(query_start_loc + steps * N)
    new_seq_lens.copy_(seq_lens + N)
