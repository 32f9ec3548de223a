"""Torch kernels of the `rejection` family: vectorized, no per-request Python loop, no host sync on CUDA
outside checked mode, a fixed and small number of launches per call.

Verification runs on a grid of cells (request r, slot j): a row emits its cells while they are "good"
(accepted), then the first cell that is not (the alternative of the first rejected draft, or the bonus in
slot n[r]); see `emit`. Probability tables [*, V] are read in as few full passes as eager Torch allows:
the scores table is built once and reduced by `first_max`.
"""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.oracles.rejection import (PLACEHOLDER, check_expand, check_greedy, check_greedy_padded,
                                          check_random, check_recovered, check_sample, check_sample_padded)

INF = float("inf")


def first_max(scores: torch.Tensor, owned: bool = False) -> torch.Tensor:
    """Per row of f32 scores [..., V]: the lowest index attaining the largest non-NaN value, 0 when a row
    is all NaN (the oracle's rule; torch.argmax lets NaN win). Four passes: the non-NaN mask, NaN -> -inf
    (in place when `owned`), one max reduction (it returns the first index of a tie; -0.0 ties +0.0),
    and the mask's first set index, the answer of rows whose maximum is -inf (only -inf and NaN there:
    the first -inf, or 0 when all NaN)."""
    numbers = scores == scores
    clean = (scores.nan_to_num_ if owned else scores.nan_to_num)(nan=-INF, posinf=INF, neginf=-INF)
    best, index = clean.max(-1)
    return torch.where(best == -INF, numbers.view(torch.uint8).argmax(-1), index)


def in_vocab(drafts: torch.Tensor, vocab: int):
    """(whether each draft is an id in [0, V), the draft clamped into [0, V) as an int64 index)."""
    safe = drafts.clamp(0, vocab - 1).long()
    return safe == drafts, safe


def recovery_scores(target, draft_probs, drafts, noise, noise_at_draft, recover=None) -> torch.Tensor:
    """A new f32 table [..., V] of the oracle's scores residual * noise per token (`noise` broadcasts
    against `target`; a new table it is may be overwritten). `recover` (bool per token, None: all) picks
    the tokens scored so; the others keep their target row (their noise must then be 1)."""
    if draft_probs is not None:
        scores = torch.sub(target, draft_probs)
        if recover is None:
            scores.clamp_min_(0)                     # NaN stays NaN, like where(diff < 0, 0, diff)
        else:
            torch.where(recover[..., None], scores.clamp_min_(0), target, out=scores)
        return scores.mul_(noise)
    scores = noise.mul_(target) if noise.shape == target.shape else torch.mul(target, noise)
    valid, safe = in_vocab(drafts, target.shape[-1])
    if recover is not None:
        valid = valid & recover
    own = target.gather(-1, safe[..., None])[..., 0]
    # the draft's own cell: 0 * noise for a valid draft (NaN under infinite noise), else unchanged
    cell = torch.where(valid, 0, own).mul_(noise_at_draft)
    return scores.scatter_(-1, safe[..., None], cell[..., None])


def accepts(drafts, target, draft_probs, uniform) -> torch.Tensor:
    """Per token: a valid draft, q > 0 and f64(f32(p / q)) >= u (q = 1 without draft probs)."""
    valid, safe = in_vocab(drafts, target.shape[-1])
    p = target.gather(-1, safe[..., None])[..., 0]
    if draft_probs is None:
        return valid & (p >= uniform)               # compared in f64
    q = draft_probs.gather(-1, safe[..., None])[..., 0]
    return valid & (q > 0) & (p / q >= uniform)


def flat_cells(cu: torch.Tensor, tokens: int, width: int):
    """The [B, width] cells of a flattened batch (T > 0): per cell (r, j) the index of request r's j-th
    token clamped into [0, T), whether r has it (j < n[r]), and j."""
    prev = torch.cat((cu.new_zeros(1), cu[:-1]))
    j = torch.arange(width, device=cu.device)
    cell = prev[:, None] + j
    has = cell < cu[:, None]
    return cell.clamp_(max=tokens - 1), has, j


def emit(out, ok, values, j, rows, fill) -> torch.Tensor:
    """Write the verified rows of `out` [B, W] from cells: ok [B, W] (every row has a cell that is not ok;
    the first ends the row) and values [B, W]. `rows` (bool [B], None: all) picks the rows written;
    `fill`: the rest of each written row is -1, else untouched. Returns the first cell not ok per row."""
    first = ok.view(torch.uint8).argmin(-1)
    written = j <= first[:, None]
    if fill:
        row = torch.where(written, values, PLACEHOLDER)
        out.copy_(row if rows is None else torch.where(rows[:, None], row, out))
    else:
        out.copy_(torch.where(written if rows is None else written & rows[:, None], values, out))
    return first


def verify_flat(out, cu, good, values, bonus, rows, fill) -> None:
    """Verify a flattened batch: token t is good (accepted) or not and emits values[t] (see `emit`)."""
    tokens = good.shape[0]
    if tokens == 0:                                  # every row emits just its bonus
        good, values = good.new_zeros(1), values.new_zeros(1)
    cell, has, j = flat_cells(cu, max(tokens, 1), out.shape[1])
    emit(out, good[cell] & has, torch.where(has, values[cell], bonus[:, None]), j, rows, fill)


def token_requests(cu: torch.Tensor, tokens: int) -> torch.Tensor:
    """The request of every token of a flattened batch (inclusive offsets)."""
    return torch.searchsorted(cu, torch.arange(tokens, dtype=cu.dtype, device=cu.device), right=True)


def greedy(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
           max_spec_len, output_token_ids):
    """See `specverify.oracles.rejection.greedy`."""
    batch = check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                         max_spec_len, output_token_ids, values=reads_values(cu_num_draft_tokens))
    if batch:
        verify_flat(output_token_ids, cu_num_draft_tokens, draft_token_ids == target_argmax, target_argmax,
                    bonus_token_ids, is_greedy, fill=False)


def random(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
           recovered_token_ids, uniform_probs, is_greedy, output_token_ids):
    """See `specverify.oracles.rejection.random`."""
    batch, _ = check_random(draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                            target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids,
                            values=reads_values(cu_num_draft_tokens))
    if batch:
        accepted = accepts(draft_token_ids, target_probs, draft_probs, uniform_probs)
        verify_flat(output_token_ids, cu_num_draft_tokens, accepted,
                    torch.where(accepted, draft_token_ids, recovered_token_ids), bonus_token_ids, ~is_greedy,
                    fill=False)


def recovered(*, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids):
    """See `specverify.oracles.rejection.recovered`."""
    check_recovered(cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids,
                    values=reads_values(cu_num_draft_tokens))
    tokens = draft_token_ids.shape[0]
    if tokens:
        request = token_requests(cu_num_draft_tokens, tokens)
        noise = inv_q.index_select(0, request)
        _, safe = in_vocab(draft_token_ids, inv_q.shape[1])
        scores = recovery_scores(target_probs, draft_probs, draft_token_ids, noise,
                                 noise.gather(1, safe[:, None])[:, 0])
        recovered_token_ids.copy_(first_max(scores, owned=True))


def sample(*, draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
           is_greedy, uniform_probs, inv_q, output_token_ids):
    """See `specverify.oracles.rejection.sample`: one scores table (the target row for greedy tokens,
    the recovery scores for the others), one `first_max`, one verification writing every row."""
    batch, _ = check_sample(draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
                            bonus_token_ids, is_greedy, uniform_probs, inv_q, output_token_ids,
                            values=reads_values(cu_num_draft_tokens))
    if batch == 0:
        return
    tokens = draft_token_ids.shape[0]
    drafts = draft_token_ids
    if is_greedy is None:
        alternatives = first_max(target_probs)
        accepted = drafts == alternatives
    else:
        request = token_requests(cu_num_draft_tokens, tokens)
        recover = ~is_greedy[request]
        # greedy tokens take a row of ones as their noise: target * 1 is the target, bit for bit
        noise_rows = torch.cat((inv_q, inv_q.new_ones(1, inv_q.shape[1])))
        noise = noise_rows.index_select(0, torch.where(recover, request, batch))
        _, safe = in_vocab(drafts, inv_q.shape[1])
        scores = recovery_scores(target_probs, draft_probs, drafts, noise, noise.gather(1, safe[:, None])[:, 0],
                                 recover)
        alternatives = first_max(scores, owned=True)
        accepted = torch.where(recover, accepts(drafts, target_probs, draft_probs, uniform_probs),
                               drafts == alternatives)
    verify_flat(output_token_ids, cu_num_draft_tokens, accepted, torch.where(accepted, drafts, alternatives),
                bonus_token_ids, None, fill=True)


def emit_padded(good, values, bonus, rows, output_token_ids, num_rejected_tokens, last_token_ids) -> None:
    """Verify padded rows from good and values [B, K] (see `emit`) and write the selected rows in full."""
    k = good.shape[1]
    cells = torch.cat((values, bonus[:, None]), 1)
    ok = torch.cat((good, good.new_zeros(good.shape[0], 1)), 1)
    first = emit(output_token_ids, ok, cells, torch.arange(k + 1, device=good.device), rows, fill=True)
    rejected = torch.sub(k, first)
    last = cells.gather(1, first[:, None])[:, 0]
    num_rejected_tokens.copy_(rejected if rows is None else torch.where(rows, rejected, num_rejected_tokens))
    last_token_ids.copy_(last if rows is None else torch.where(rows, last, last_token_ids))


def greedy_padded(*, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                  num_rejected_tokens, last_token_ids):
    """See `specverify.oracles.rejection.greedy_padded`."""
    batch, _ = check_greedy_padded(draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                                   num_rejected_tokens, last_token_ids, values=reads_values(draft_token_ids))
    if batch:
        emit_padded(draft_token_ids == target_argmax, target_argmax, bonus_token_ids, is_greedy,
                    output_token_ids, num_rejected_tokens, last_token_ids)


def sample_padded(*, draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy, uniform_probs,
                  inv_q, output_token_ids, num_rejected_tokens, last_token_ids):
    """See `specverify.oracles.rejection.sample_padded`: as `sample`, on [B, K] without a token layout."""
    batch, k = check_sample_padded(draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy,
                                   uniform_probs, inv_q, output_token_ids, num_rejected_tokens, last_token_ids,
                                   values=reads_values(draft_token_ids))
    if batch == 0:
        return
    drafts = draft_token_ids
    if is_greedy is None or k == 0:
        alternatives = first_max(target_probs)
        accepted = drafts == alternatives
    else:
        recover = ~is_greedy[:, None].expand(batch, k)
        noise = torch.where(recover[:, :1], inv_q, 1)[:, None, :]
        _, safe = in_vocab(drafts, inv_q.shape[1])
        scores = recovery_scores(target_probs, draft_probs, drafts, noise, noise[:, 0].gather(1, safe), recover)
        alternatives = first_max(scores, owned=True)
        accepted = torch.where(recover, accepts(drafts, target_probs, draft_probs, uniform_probs),
                               drafts == alternatives)
    emit_padded(accepted, torch.where(accepted, drafts, alternatives), bonus_token_ids, None,
                output_token_ids, num_rejected_tokens, last_token_ids)


def expand(*, x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded):
    """See `specverify.oracles.rejection.expand`."""
    value_from, value_to = check_expand(x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded,
                                        values=reads_values(cu_num_tokens))
    if num_tokens == 0:
        return
    request = token_requests(cu_num_tokens, num_tokens)
    replaced = torch.where(x == value_from.item(), value_to.item(), x)   # Python scalars keep x's dtype
    torch.index_select(replaced, 0, request, out=expanded)
