"""Torch kernels of the `ngram` family (prompt-lookup drafting): one batched gather reads, for every end
position of every searched history, the M tokens up to it; a running product of their agreement with the
request's last tokens gives each match length, and one max of a unique key per end picks the occurrence.
Vectorized over the batch: no per-request loop, no host sync on CUDA outside checked mode."""
from __future__ import annotations

import torch

from specverify.kernels.torch.layout import iota, scalar
from specverify.kernels.validation import reads_values
from specverify.oracles import ngram as oracle

POOL_CHUNK = 2**26      # elements of one [requests, histories, T, M] comparison of a pooled search


def windows_before(token_ids: torch.Tensor, lengths: torch.Tensor, depth: int):
    """([B, T, M] h_j[e - i], [B, T, M] whether it counts): history j's tokens up to end position e read
    backwards, i < M = depth; an end counts with a follower (e <= L_j - 2), a token with e - i >= 0."""
    ends = iota(token_ids.shape[1], token_ids)
    back = ends[:, None] - iota(depth, token_ids)
    counted = (back >= 0) & (ends[:, None] <= lengths[:, None, None] - 2)
    return token_ids[:, back.clamp(min=0)], counted


def last_tokens(token_ids: torch.Tensor, lengths: torch.Tensor, depth: int):
    """([B, M] h_b[L - 1 - i], [B, M] whether i < L - 1): each request's last tokens read backwards, as many
    as a match may use (it leaves a follower)."""
    back = iota(depth, token_ids)
    columns = (lengths[:, None] - 1 - back).clamp(min=0)           # L <= T: never past the row
    return token_ids.gather(1, columns), back < lengths[:, None] - 1


def best_match(rule: oracle.Rule, windows, counted, pattern, pattern_counted, requests: torch.Tensor,
               sources: torch.Tensor, min_n: int):
    """([C] flat index j * T + e of the best end, [C] whether there is a match) of requests [C] over the
    histories `sources` ([C, 1]: each its own, [1, B]: the pool), windows [C or 1, J, T, M] against patterns
    [C, 1, 1, M]. The key (m, own history, start order, -j) is unique per end: among ends of the longest
    length m, the start e - m + 1 orders as e does; j counts as its place in `sources` (ascending)."""
    searched, width = sources.shape[1], windows.shape[2]
    agree = (windows == pattern) & counted & pattern_counted
    lengths = agree.cumprod(dim=-1, dtype=torch.uint8).sum(dim=-1)            # [C, J, T] int64
    ends = iota(width, windows)
    order = ends if rule.occurrence in ("rightmost", "newest") else width - 1 - ends
    own = (sources == requests[:, None]).long()
    place = iota(searched, windows)[:, None]
    key = ((lengths * 2 + own[:, :, None]) * width + order) * searched + (searched - 1 - place)
    key = torch.where(lengths >= min_n, key, scalar(-1, key))
    best, flat = key.flatten(1).max(dim=1)
    return flat, best >= 0


def fill_values(rule: oracle.Rule, token_ids: torch.Tensor, lengths: torch.Tensor, draft_token_ids):
    """What the slots past the proposal hold: a 0-dim id, [B, 1] last tokens (-1 for an empty history),
    or ("none") the drafts as they are, written back unchanged."""
    if rule.fill == "none":
        return draft_token_ids
    if rule.fill == "last":
        last = token_ids.gather(1, (lengths[:, None] - 1).clamp(min=0))
        return torch.where(lengths[:, None] > 0, last, scalar(-1, last, last.dtype))
    return scalar(int(rule.fill), token_ids, token_ids.dtype)


def proposed(rule: oracle.Rule, *, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
             num_draft_tokens) -> None:
    """The drafts of every request under `rule` (see `specverify.oracles.ngram`)."""
    batch, width, k = oracle.check_propose(token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                                           num_draft_tokens, values=reads_values(token_ids))
    if batch == 0:
        return
    if width == 0:                      # every history is empty: one column, never used, keeps gathers in range
        token_ids, width = token_ids.new_zeros((batch, 1)), 1
    lengths = num_tokens.long()
    depth = min(max_n, width - 1)       # a match leaves a follower: n <= L - 1 <= T - 1
    windows, counted = windows_before(token_ids, lengths, depth)
    pattern, pattern_counted = (p[:, None, None, :] for p in last_tokens(token_ids, lengths, depth))
    requests = iota(batch, token_ids)
    if rule.pooled:
        chunk = max(1, POOL_CHUNK // max(1, batch * width * depth))
        found = [best_match(rule, windows[None], counted[None], pattern[r:r + chunk],
                            pattern_counted[r:r + chunk], requests[r:r + chunk], requests[None, :], min_n)
                 for r in range(0, batch, chunk)]
        flat, matched = (torch.cat(parts) for parts in zip(*found))
        source, end = flat.div(width, rounding_mode="floor"), flat.remainder(width)
    else:
        end, matched = best_match(rule, windows[:, None], counted[:, None], pattern, pattern_counted, requests,
                                  requests[:, None], min_n)
        source = requests
    cap = min(max_model_len, width + k) if rule.capped else width + k     # at T + K no cap binds (and no overflow)
    budget = (cap - lengths).clamp(0, k)
    count = torch.where(matched, torch.minimum(lengths[source] - 1 - end, budget), scalar(0, budget))
    slots = iota(k, token_ids)
    proposal = token_ids[source[:, None], (end[:, None] + 1 + slots).clamp(max=width - 1)]
    num_draft_tokens.copy_(count)
    draft_token_ids.copy_(torch.where(slots < count[:, None], proposal,
                                      fill_values(rule, token_ids, lengths, draft_token_ids)))


def propose(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
            num_draft_tokens) -> None:
    """See `specverify.oracles.ngram.propose`."""
    proposed(oracle.RULES[""], **locals())


def propose_short(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                  num_draft_tokens) -> None:
    """See `specverify.oracles.ngram.propose_short`."""
    proposed(oracle.RULES["short"], **locals())


def propose_uncapped(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                     num_draft_tokens) -> None:
    """See `specverify.oracles.ngram.propose_uncapped`."""
    proposed(oracle.RULES["uncapped"], **locals())


def propose_rightmost_last(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                           num_draft_tokens) -> None:
    """See `specverify.oracles.ngram.propose_rightmost_last`."""
    proposed(oracle.RULES["rightmost_last"], **locals())


def propose_trtllm_newest(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                          num_draft_tokens) -> None:
    """See `specverify.oracles.ngram.propose_trtllm_newest`."""
    proposed(oracle.RULES["trtllm_newest"], **locals())


def propose_trtllm_oldest(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                          num_draft_tokens) -> None:
    """See `specverify.oracles.ngram.propose_trtllm_oldest`."""
    proposed(oracle.RULES["trtllm_oldest"], **locals())
