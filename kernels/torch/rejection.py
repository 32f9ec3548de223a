"""Torch kernels of the `rejection` family: vectorized, no per-request Python loop, no host sync
on CUDA outside checked mode.

Every verification stage runs through `verify_grid` on a [B, S] grid of drafts; the flattened stages
scatter their tokens into that grid first, the padded ones already have it.
"""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.kernels.torch.layout import masked_store, token_layout
from specverify.oracles.rejection import (PLACEHOLDER, check_expand, check_greedy, check_greedy_padded,
                                          check_random, check_recovered, check_sample, check_sample_padded)


def to_grid(values: torch.Tensor, request, position, shape, fill=0) -> torch.Tensor:
    """Per-token values scattered into a [B, S] grid (`fill` where a request has no token)."""
    grid = torch.full(shape, fill, dtype=values.dtype, device=values.device)
    grid[request, position] = values
    return grid


def verify_grid(drafts, alternatives, accepted, counts, bonus):
    """Row-wise verification on [B, S] grids: emit accepted drafts, the alternative of the first rejected
    one, or the bonus after `counts[b]` accepted ones. Returns (values [B, S+1], emitted [B])."""
    batch, slots = drafts.shape
    pos = torch.arange(slots, device=drafts.device)
    rejected = (pos < counts[:, None]) & ~accepted
    first = torch.where(rejected, pos, slots).amin(1, keepdim=True) if slots else counts.new_full((batch, 1), 0)
    none_rejected = (first[:, 0] >= counts) if slots else torch.ones(batch, dtype=torch.bool, device=drafts.device)
    values = torch.cat([torch.where(accepted, drafts, alternatives),
                        drafts.new_zeros(batch, 1)], 1)
    rows = torch.arange(batch, device=drafts.device)
    values[rows, counts] = torch.where(none_rejected, bonus, values[rows, counts])
    emitted = torch.where(none_rejected, counts + 1, first[:, 0] + 1)
    return values, emitted


def emit_flat(out, request, position, counts, drafts, alternatives, accepted, bonus, rows):
    """Write the emitted prefix of the selected rows of a flattened batch; nothing else."""
    shape = (len(counts), out.shape[1] - 1)
    values, emitted = verify_grid(to_grid(drafts.long(), request, position, shape),
                                  to_grid(alternatives.long(), request, position, shape),
                                  to_grid(accepted, request, position, shape, False), counts, bonus)
    cols = torch.arange(out.shape[1], device=out.device)
    masked_store(out, (cols < emitted[:, None]) & rows[:, None], values)


def greedy_rows_of(is_greedy, batch, device):
    return torch.ones(batch, dtype=torch.bool, device=device) if is_greedy is None else is_greedy


def first_max(scores: torch.Tensor) -> torch.Tensor:
    """Per row of [N, V] scores: the lowest index attaining the maximum; NaN never wins; 0 when a row is
    all NaN (torch.argmax is not used: its NaN and tie rules differ)."""
    vocab = scores.shape[1]
    best = torch.where(torch.isnan(scores), float("-inf"), scores).amax(1, keepdim=True)
    index = torch.arange(vocab, device=scores.device)
    found = torch.where(scores == best, index, vocab).amin(1)
    return torch.where(found == vocab, 0, found)


def in_vocab(drafts: torch.Tensor, vocab: int):
    """(whether each draft is a valid id, the draft clamped to a safe index)."""
    d = drafts.long()
    valid = (d >= 0) & (d < vocab)
    return valid, torch.where(valid, d, 0)


def recover(target, draft_probs, drafts, inv_q_rows) -> torch.Tensor:
    """Per token of [N, V] tables: first_max of the f32 scores residual * inv_q (see the oracle)."""
    if draft_probs is not None:
        diff = target - draft_probs
        prob = torch.where(diff < 0, 0, diff)
    else:
        valid, safe = in_vocab(drafts, target.shape[1])
        own = target.gather(1, safe[:, None])
        prob = target.scatter(1, safe[:, None], torch.where(valid[:, None], 0, own))
    return first_max(prob * inv_q_rows)


def accepts(drafts, target, draft_probs, uniform) -> torch.Tensor:
    """Per token: valid draft, q > 0 and f64(f32(p / q)) >= u."""
    valid, safe = in_vocab(drafts, target.shape[1])
    p = target.gather(1, safe[:, None])[:, 0]
    q = torch.ones_like(p) if draft_probs is None else draft_probs.gather(1, safe[:, None])[:, 0]
    positive = q > 0
    ratio = p / torch.where(positive, q, 1)
    return valid & positive & (ratio.double() >= uniform)


def greedy(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
           max_spec_len, output_token_ids):
    """See `specverify.oracles.rejection.greedy`."""
    batch = check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                         max_spec_len, output_token_ids, values=reads_values(cu_num_draft_tokens))
    if batch == 0:
        return
    request, position, counts = token_layout(cu_num_draft_tokens, draft_token_ids.shape[0])
    emit_flat(output_token_ids, request, position, counts, draft_token_ids, target_argmax,
              draft_token_ids.long() == target_argmax, bonus_token_ids,
              greedy_rows_of(is_greedy, batch, output_token_ids.device))


def random(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
           recovered_token_ids, uniform_probs, is_greedy, output_token_ids):
    """See `specverify.oracles.rejection.random`."""
    batch, _ = check_random(draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                            target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids,
                            values=reads_values(cu_num_draft_tokens))
    if batch == 0:
        return
    request, position, counts = token_layout(cu_num_draft_tokens, draft_token_ids.shape[0])
    emit_flat(output_token_ids, request, position, counts, draft_token_ids, recovered_token_ids,
              accepts(draft_token_ids, target_probs, draft_probs, uniform_probs), bonus_token_ids, ~is_greedy)


def recovered(*, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids):
    """See `specverify.oracles.rejection.recovered`."""
    check_recovered(cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids,
                    values=reads_values(cu_num_draft_tokens))
    if draft_token_ids.shape[0] == 0:
        return
    request, _, _ = token_layout(cu_num_draft_tokens, draft_token_ids.shape[0])
    recovered_token_ids.copy_(recover(target_probs, draft_probs, draft_token_ids, inv_q[request]))


def sample(*, draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
           is_greedy, uniform_probs, inv_q, output_token_ids):
    """See `specverify.oracles.rejection.sample`: runs `greedy`, `recovered` and `random` in turn."""
    check_sample(draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
                 is_greedy, uniform_probs, inv_q, output_token_ids, values=reads_values(cu_num_draft_tokens))
    output_token_ids.fill_(PLACEHOLDER)
    greedy(draft_token_ids=draft_token_ids, target_argmax=first_max(target_probs), bonus_token_ids=bonus_token_ids,
           cu_num_draft_tokens=cu_num_draft_tokens, is_greedy=is_greedy, max_spec_len=max_spec_len,
           output_token_ids=output_token_ids)
    if is_greedy is None:
        return
    recovered_ids = torch.zeros(draft_token_ids.shape[0], dtype=torch.int32, device=draft_token_ids.device)
    recovered(cu_num_draft_tokens=cu_num_draft_tokens, draft_token_ids=draft_token_ids, draft_probs=draft_probs,
              target_probs=target_probs, inv_q=inv_q, recovered_token_ids=recovered_ids)
    random(draft_token_ids=draft_token_ids, bonus_token_ids=bonus_token_ids, cu_num_draft_tokens=cu_num_draft_tokens,
           max_spec_len=max_spec_len, draft_probs=draft_probs, target_probs=target_probs,
           recovered_token_ids=recovered_ids, uniform_probs=uniform_probs, is_greedy=is_greedy,
           output_token_ids=output_token_ids)


def store_padded(rows, values, emitted, output_token_ids, num_rejected_tokens, last_token_ids) -> None:
    """Write the selected rows of the padded outputs in full (see `greedy_padded`)."""
    cols = torch.arange(values.shape[1], device=values.device)
    full = torch.where(cols < emitted[:, None], values, PLACEHOLDER)
    output_token_ids.copy_(torch.where(rows[:, None], full, output_token_ids))
    num_rejected_tokens.copy_(torch.where(rows, values.shape[1] - emitted, num_rejected_tokens))
    last = values.gather(1, (emitted - 1)[:, None])[:, 0]
    last_token_ids.copy_(torch.where(rows, last, last_token_ids))


def greedy_padded(*, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                  num_rejected_tokens, last_token_ids):
    """See `specverify.oracles.rejection.greedy_padded`."""
    batch, k = check_greedy_padded(draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                                   num_rejected_tokens, last_token_ids, values=reads_values(draft_token_ids))
    if batch == 0:
        return
    counts = torch.full((batch,), k, dtype=torch.long, device=draft_token_ids.device)
    values, emitted = verify_grid(draft_token_ids, target_argmax, draft_token_ids == target_argmax, counts,
                                  bonus_token_ids)
    store_padded(greedy_rows_of(is_greedy, batch, draft_token_ids.device), values, emitted, output_token_ids,
                 num_rejected_tokens, last_token_ids)


def sample_padded(*, draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy, uniform_probs,
                  inv_q, output_token_ids, num_rejected_tokens, last_token_ids):
    """See `specverify.oracles.rejection.sample_padded`."""
    batch, k = check_sample_padded(draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy,
                                   uniform_probs, inv_q, output_token_ids, num_rejected_tokens, last_token_ids,
                                   values=reads_values(draft_token_ids))
    if batch == 0:
        return
    vocab = target_probs.shape[2]
    target = target_probs.reshape(batch * k, vocab)
    drafts = draft_token_ids.reshape(-1)
    alternatives = first_max(target)
    accepted = drafts == alternatives
    if is_greedy is not None:
        dp = None if draft_probs is None else draft_probs.reshape(batch * k, vocab)
        rows = torch.arange(batch, device=drafts.device).repeat_interleave(k)
        random_token = ~is_greedy[rows]
        alternatives = torch.where(random_token, recover(target, dp, drafts, inv_q[rows]), alternatives)
        accepted = torch.where(random_token, accepts(drafts, target, dp, uniform_probs.reshape(-1)), accepted)
    counts = torch.full((batch,), k, dtype=torch.long, device=drafts.device)
    values, emitted = verify_grid(draft_token_ids, alternatives.reshape(batch, k), accepted.reshape(batch, k),
                                  counts, bonus_token_ids)
    store_padded(torch.ones(batch, dtype=torch.bool, device=drafts.device), values, emitted, output_token_ids,
                 num_rejected_tokens, last_token_ids)


def expand(*, x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded):
    """See `specverify.oracles.rejection.expand`."""
    value_from, value_to = check_expand(x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded,
                                        values=reads_values(cu_num_tokens))
    if num_tokens == 0:
        return
    request, _, _ = token_layout(cu_num_tokens, num_tokens)
    replaced = torch.where(x == value_from.item(), value_to.item(), x)   # Python scalars keep x's dtype
    expanded.copy_(replaced[request])
