"""Torch kernels of the `seeded` family: vectorized over requests, no host sync outside checked mode.

`seeded.chain_sampling`: the K + 2 uniforms of every request come from cuRAND's stream at once
(`specverify.kernels.torch.generators`); every position's two acceptance tests (with U_i, and with U_{i+1} for
the count after the first rejection) are [B, K] gathers and compares; the pick row (one per request) is
gathered, clamped at 0, scanned by one cumsum and searched."""
from __future__ import annotations

import torch

from specverify.kernels.torch.generators import curand_uniforms
from specverify.kernels.torch.layout import iota, scalar
from specverify.kernels.validation import reads_values, validate
from specverify.oracles.seeded import check_chain_sampling


def drawn_token(res: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[B] int64: per row, the lowest v with res[v] > 0 whose running sum exceeds t = f32(u * total), else the
    largest v with res[v] > 0, else -1."""
    vocab = res.shape[-1]
    sums = res.cumsum(-1)
    positive = res > 0
    hits = torch.gt(sums, (u * sums[:, -1])[:, None]).logical_and_(positive)
    first = hits.view(torch.uint8).argmax(-1)
    last = (vocab - 1) - positive.flip(-1).view(torch.uint8).argmax(-1)
    rows = iota(res.shape[0], first)
    fallback = torch.where(positive[rows, last], last, scalar(-1, last))
    return torch.where(hits[rows, first], first, fallback)


def chain_sampling(*, draft_probs, draft_token_ids, target_probs, seed, offset, output_token_ids,
                   output_accepted_token_num, output_emitted_draft_token_num):
    """See `specverify.oracles.seeded.chain_sampling`."""
    batch, k, vocab = validate(check_chain_sampling, draft_probs, draft_token_ids, target_probs, seed, offset,
                               output_token_ids, output_accepted_token_num, output_emitted_draft_token_num,
                               values=reads_values(draft_token_ids))
    if batch == 0:
        return
    rows = iota(batch, seed)
    uniforms = curand_uniforms(seed, rows, offset, k + 2)                        # [B, K+2] f32
    drafts = draft_token_ids.long()
    valid = (drafts >= 0) & (drafts < vocab)
    safe = torch.where(valid, drafts, scalar(0, drafts))[..., None]               # never read for -1 or >= V
    p = target_probs[:, :k].gather(-1, safe)[..., 0]
    q = draft_probs.gather(-1, safe)[..., 0]
    first = valid & (uniforms[:, :k] * q < p)                                    # position i with U_i
    later = valid & (uniforms[:, 1:k + 1] * q < p)                               # position i with U_{i+1}
    stop = torch.cat((first, first.new_zeros((batch, 1))), 1)                    # slot K never passes
    pos = stop.view(torch.uint8).argmin(-1)                                      # the first rejection, or K
    slots = iota(k + 1, pos)
    accepted = pos + (later & (slots[:k] > pos[:, None])).sum(-1)
    rejected = pos < k
    p_row = target_probs[rows, pos]
    q_row = draft_probs[rows, pos.clamp(max=max(k - 1, 0))] if k else torch.zeros_like(p_row)
    res = torch.clamp_min(p_row - torch.where(rejected[:, None], q_row, scalar(0.0, q_row, q_row.dtype)), 0.0)
    u = torch.where(rejected, uniforms[:, k + 1], uniforms[:, k])
    token = drawn_token(res, u)
    padded = torch.cat((drafts, drafts.new_full((batch, 1), -1)), 1)
    values = torch.where(slots < pos[:, None], padded, torch.where(slots == pos[:, None], token[:, None],
                                                                    scalar(-1, token)))
    output_token_ids.copy_(values)
    output_accepted_token_num.add_(accepted.to(torch.int32))
    output_emitted_draft_token_num.add_(pos.to(torch.int32))
