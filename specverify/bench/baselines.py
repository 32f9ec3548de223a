"""Naive implementations benched beside ours: the reference a stage's speed goal is stated against."""
from __future__ import annotations

from dataclasses import dataclass


def naive_parse(*, output_token_ids, vocab_size, discard_req_indices, token_ids=None, logprobs=None, ranks=None):
    """output.parse without logprobs, as the per-row filter production code replaces: one fancy index and
    tolist() per request."""
    if token_ids is not None or logprobs is not None or ranks is not None:
        raise ValueError("token_ids: the naive filter takes no logprobs")
    out = [row[(row >= 0) & (row < vocab_size)].tolist() for row in output_token_ids]
    for r in discard_req_indices:
        out[r] = []
    return out, None


@dataclass(frozen=True)
class Baseline:
    name: str        # its backend column in the report
    source: str      # "module:function"
    goal: float      # our host time / its host time must stay at or below this ...
    max_batch: int   # ... at every B up to this


BASELINES = {"output.parse": Baseline("naive", "specverify.bench.baselines:naive_parse", 0.35, 512)}
