"""Deliberately wrong `rejection.greedy` implementations: the suite must catch each one.

They wrap the real Torch kernel and then break one promise, as a real engine kernel might.
"""
import os
import signal

import torch

from specverify.kernels.torch.rejection import greedy


def capped_at_128(**kw):
    """An engine that handles at most 128 drafts per request: later positions are never written."""
    out = kw["output_token_ids"]
    before = out.clone()
    greedy(**kw)
    out[:, 128:] = before[:, 128:]


def bonus_even_after_reject(**kw):
    """Writes the bonus token at n[r] for every greedy row, rejected or not."""
    greedy(**kw)
    cu = kw["cu_num_draft_tokens"].long()
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    rows = torch.arange(len(cu))
    greedy_rows = kw["is_greedy"] if kw["is_greedy"] is not None else torch.ones(len(cu), dtype=torch.bool)
    out = kw["output_token_ids"]
    out[rows[greedy_rows], counts[greedy_rows]] = kw["bonus_token_ids"][greedy_rows].to(torch.int32)


def kills_its_process(**kw):
    """A kernel that takes its process down (as a segfault would)."""
    os.kill(os.getpid(), signal.SIGKILL)
