"""Test fixtures, not production kernels: `rejection.sample_padded` (our Torch kernel) with the acceptance
ratio computed as p * (1 / q), a reciprocal then a product: two roundings, within 2 ulp of p / q, as an
approximate division is, on every device. It conforms under dialect `approx_div` and fails the record's
rule on a uniform at the ratio. `sample_padded_ignoring_q` adds a real bug: it tests p >= u, as if every
draft were one-hot, even where draft probabilities are given.
"""
from __future__ import annotations

import torch

from specverify.kernels.torch import rejection as ours


def reciprocal_accepts(valid, safe, target, draft_probs, uniform, rule=ours.RATIO, out=None):
    """`ours.accepts` under the record's rule, with p / q as f32(p * f32(1 / q))."""
    if draft_probs is None:
        return EXACT(valid, safe, target, draft_probs, uniform, rule, out)
    p, q = ours.at_drafts(target, safe), ours.at_drafts(draft_probs, safe)
    return torch.logical_and(valid, p * torch.reciprocal(ours.positive(q)) >= uniform, out=out)


def one_hot_accepts(valid, safe, target, draft_probs, uniform, rule=ours.RATIO, out=None):
    """The bug: q never read."""
    return EXACT(valid, safe, target, None, uniform, rule, out)


EXACT = ours.accepts


def with_accepts(accepts, kw) -> None:
    ours.accepts = accepts
    try:
        ours.sample_padded(**kw)
    finally:
        ours.accepts = EXACT


def sample_padded(**kw):
    """rejection.sample_padded dividing approximately."""
    with_accepts(reciprocal_accepts, kw)


def sample_padded_ignoring_q(**kw):
    """rejection.sample_padded dividing approximately, and never reading q."""
    with_accepts(one_hot_accepts, kw)
