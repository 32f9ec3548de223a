"""N-gram proposers with one planted bug each, the kinds engines shipped (outside implementations for the tests).

Each runs a loop-level proposer on the tensors' host copies and writes the results back: the record's rule (or
`rightmost_last`'s) with one thing wrong.
"""
from __future__ import annotations

import numpy as np
import torch


def planted(token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids, num_draft_tokens, *,
            rightmost=False, fill=-1, capped=True, cap_slack=0, pattern_short=False, self_match=False,
            pooled=False):
    """The common rule with the planted deviations: `cap_slack` added to the cap, the pattern compared one token
    short, the window allowed to end at L - 1 (no follower required), the batch searched as a pool."""
    tokens, lengths = token_ids.cpu().numpy(), num_tokens.cpu().numpy()
    batch, k = draft_token_ids.shape
    out, counts = draft_token_ids.cpu().numpy().copy(), np.zeros(batch, np.int32)
    histories = [tokens[b, :int(lengths[b])].tolist() for b in range(batch)]
    for b, h in enumerate(histories):
        length, proposal = len(h), []
        for n in range(min(max_n, length - 1), min_n - 1, -1):
            skip = 1 if pattern_short else 0
            pattern = h[length - n + skip:]
            sources = histories if pooled else [h]
            starts = [(j, s) for j, other in enumerate(sources)
                      for s in range(0, len(other) - n + (1 if self_match else 0))
                      if other[s + skip:s + n] == pattern]
            if starts:
                j, s = starts[-1] if rightmost else starts[0]
                room = min(k, max_model_len - length + cap_slack) if capped else k
                proposal = sources[j][s + n:s + n + max(0, room)]
                break
        counts[b] = len(proposal)
        out[b, :len(proposal)] = proposal
        out[b, len(proposal):] = (h[-1] if h else -1) if fill == "last" else fill
    draft_token_ids.copy_(torch.from_numpy(out))
    num_draft_tokens.copy_(torch.from_numpy(counts))


def leftmost_for_rightmost(**f):
    """Declared rightmost_last; takes the leftmost occurrence (vLLM PR #22437's `>=` for `>`)."""
    planted(**f, fill="last", capped=False)


def cap_off_by_one(**f):
    """One draft more than max_model_len - L allows (vLLM #42533's neighbour)."""
    planted(**f, cap_slack=1)


def zero_fill(**f):
    """0 instead of -1 past the proposal."""
    planted(**f, fill=0)


def pattern_one_short(**f):
    """The pattern compared without its first token (FastDeploy PR #7774's pointer)."""
    planted(**f, pattern_short=True)


def match_at_the_end(**f):
    """A window may end at L - 1: the pattern matches itself and has no follower."""
    planted(**f, self_match=True)


def pooled_leftmost(**f):
    """The record's rule over a pool of every request's history (information flows between requests)."""
    planted(**f, pooled=True)
