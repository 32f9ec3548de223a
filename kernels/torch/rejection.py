"""Torch kernels of the `rejection` family: vectorized, no per-request Python loop, no host sync on CUDA
outside checked mode, a fixed and small number of launches per call.

Verification runs on a grid of cells (request r, slot j): a row emits its cells while they are "good"
(accepted), then the first cell that is not (the alternative of the first rejected draft, or the bonus in
slot n[r]); see `emit`. Probability tables [*, V] are read in as few full passes as eager Torch allows
(`bench/torch_passes.py` counts them): the scores table is built once (its noise rows broadcast on a grid
of equal requests) and reduced by `first_max` in three passes. The NaN rule costs one table write that no
reduction can spare: every ATen reduction lets NaN win or ranks it above +inf, and eager ops cannot be
limited to the rows that hold a NaN without reading a count back.

`rejection.chain_cdf` (the last section) is vectorized over requests, with no host sync outside checked mode.
Acceptance is decided for every draft at once ([B, K] gathers of p and q at the drafts); the first
rejection of each row selects the one row of V per request the pick reads (the residual row, or p_K),
which is gathered, cleaned in place (`pick_rows`), scanned by one cumsum and searched. Only the emitted
slots are written.
"""
from __future__ import annotations

import functools

import torch

from specverify.kernels.torch.layout import as_flags, constant, iota, low_bits, scalar, zeros
from specverify.kernels.validation import reads_values, validate
from specverify.oracles.rejection import (PLACEHOLDER, check_chain_cdf, check_expand, check_greedy, check_greedy_padded,
                                          check_random, check_recovered, check_sample, check_sample_padded)

INF, NAN = float("inf"), float("nan")
# `accepts`' rule: the record's `p / q >= u`; dialect `strict`'s `f32(u) * q < p` with q in (0, 1]; `strict_q0`'s
# without the range test
RATIO, STRICT, STRICT_Q0 = "ratio", "strict", "strict_q0"


def first_max(scores: torch.Tensor, owned: bool = False) -> torch.Tensor:
    """Per row of f32 scores [..., V]: the lowest index attaining the largest non-NaN value, 0 when a row
    is all NaN (the oracle's rule; torch.max lets NaN win). Three passes: the row minimum of the int32
    view, NaN -> -inf (in place when `owned`), one max reduction (the first index of a tie, whose value it
    returns; -0.0 ties +0.0). The int32 minimum decides rows whose largest non-NaN value is -inf (or that
    have none): there -inf's pattern is the smallest (a NaN's is above it), so its index is the first -inf;
    such a row's cleaned maximum is -inf at index 0, right when the row is all NaN. It is taken exactly
    when its pattern is the maximum's: elsewhere that means every non-NaN value is the maximum itself, or
    the maximum is -0.0 (the first zero) or negative (the int32 minimum of negative floats is the largest),
    so both indices agree."""
    lowest, first_low = scores.view(torch.int32).min(-1)      # read before the table is cleaned
    clean = (scores.nan_to_num_ if owned else scores.nan_to_num)(nan=-INF, posinf=INF, neginf=-INF)
    best, index = clean.max(-1)
    return torch.where(lowest == best.view(torch.int32), first_low, index)


def in_vocab(drafts: torch.Tensor, vocab: int):
    """(whether each draft is an id in [0, V), the draft clamped into [0, V) as int64, in one launch: CUDA
    copies an int32 index of advanced indexing to int64 first). The bounds are 0-dim views of the cached
    arange (the Tensor form of clamp casts into its `out`; the Scalar form does not)."""
    bounds = iota(vocab, drafts)
    safe = torch.clamp(drafts, bounds[0], bounds[vocab - 1],
                       out=torch.empty(drafts.shape, device=drafts.device, dtype=torch.long))
    return safe == drafts, safe


def at_drafts(table: torch.Tensor, safe: torch.Tensor) -> torch.Tensor:
    """table[..., safe] per position in one launch (`safe` int64, like the row index: CUDA copies an int32
    index to int64 first)."""
    rows = table.reshape(-1, table.shape[-1])
    return rows[iota(rows.shape[0], table), safe.reshape(-1)].view(safe.shape)


def request_grid(tokens: int, batch: int, spec) -> tuple[int, int] | None:
    """(B, S) when a flattened batch is the grid of B requests of S drafts each: T == B * S with the
    `max_spec_len` S given, since no request has more than S drafts (its tokens [T, V] are then [B, S, V]
    rows, every noise row a broadcast). None otherwise."""
    if spec is None or batch == 0 or tokens != batch * spec:
        return None
    return batch, spec


def recovery_scores(target, draft_probs, valid, safe, noise, noise_at_draft, greedy=None,
                    noise_owned: bool = True) -> torch.Tensor:
    """A new f32 table [..., V] of the oracle's scores residual * noise per token (`noise` broadcasts
    against `target`; when `noise_owned` and of target's shape it is overwritten). valid, safe: `in_vocab`
    of the drafts (safe as an int64 index); `noise_at_draft()` gives the noise at each safe draft. `greedy`
    (bool per token, None: none) picks tokens that keep their target row instead (their noise must then
    be 1): with draft probs they subtract 0 (p - 0 is p, bit for bit) and are clamped at -inf (a no-op)."""
    if draft_probs is not None:
        if greedy is None:
            scores = torch.sub(target, draft_probs)
            scores.clamp_min_(0)                     # NaN stays NaN, like where(diff < 0, 0, diff)
        else:
            mask, zero = greedy[..., None], scalar(0.0, target, target.dtype)
            scores = torch.where(mask, zero, draft_probs)
            torch.sub(target, scores, out=scores)
            scores.clamp_min_(torch.where(mask, scalar(-INF, target, target.dtype), zero))
        return scores.mul_(noise)
    at_draft = noise_at_draft()                       # before `noise` may be overwritten below
    scores = noise.mul_(target) if noise_owned and noise.shape == target.shape else torch.mul(target, noise)
    if greedy is not None:
        valid = valid > greedy                        # valid and not greedy
    own = at_drafts(target, safe)
    # the draft's own cell: 0 * noise for a valid draft (NaN under infinite noise), else unchanged
    cell = torch.where(valid, scalar(0.0, target, target.dtype), own).mul_(at_draft)
    return scores.scatter_(-1, safe[..., None], cell[..., None])


def positive(q: torch.Tensor) -> torch.Tensor:
    """q where q > 0, else NaN (one launch): a ratio or product with it is NaN and fails every comparison,
    as the test q > 0 would."""
    return torch.nn.functional.threshold(q, 0.0, NAN)


def accepts(valid, safe, target, draft_probs, uniform, rule: str = RATIO, out=None) -> torch.Tensor:
    """Per token: a valid draft and, by `rule`, q > 0 and f64(f32(p / q)) >= u (RATIO), or f32(f32(u) * q) < p
    with q in (0, 1] (STRICT) or any q (STRICT_Q0); q = 1 without draft probs. valid, safe: `in_vocab` of
    the drafts. `out`: an integer buffer the last conjunction writes 0/1 into (else a bool is returned)."""
    p = at_drafts(target, safe)
    q = None if draft_probs is None else at_drafts(draft_probs, safe)
    if rule != RATIO:
        u = uniform.to(torch.float32)                # rounded to nearest
        if q is None:
            tests = [valid, u < p]
        elif rule == STRICT:
            tests = [valid, q <= 1, u * positive(q) < p]
        else:
            tests = [valid, u * q < p]
    elif q is None:
        tests = [valid, p >= uniform]                # compared in f64
    else:
        tests = [valid, p / positive(q) >= uniform]
    accepted = functools.reduce(torch.logical_and, tests[:-1])
    return torch.logical_and(accepted, tests[-1], out=out)


def starts(cu: torch.Tensor) -> torch.Tensor:
    """The exclusive offsets start(r) of inclusive offsets `cu` (one launch)."""
    return torch.cat((scalar(0, cu, cu.dtype).view(1), cu[:-1]))


def flat_grid(cu: torch.Tensor, tokens: int, width: int, prev: torch.Tensor | None = None) -> torch.Tensor:
    """[B, width] int64: per cell (r, j) the token start(r) + j while j < n[r], else tokens + r (row r's
    slot in a source laid out as [one per token ..., one per request ...]). `prev`: `starts(cu)`, when
    the caller has it."""
    batch = cu.shape[0]
    ar = iota(tokens + batch + width, cu)
    cell = (starts(cu) if prev is None else prev)[:, None] + ar[:width]
    return torch.where(cell < cu[:, None], cell, ar[tokens:tokens + batch, None])


def emit(out, ok, values, rows, fill, skip=None) -> torch.Tensor:
    """Write verified rows of `out` [B, W] from ok (0/1) and values [B, W] (every row has a cell that is
    not ok): a row emits its cells while ok, then the first that is not. `rows` (bool [B]) picks the
    rows written, or `skip` (bool [B]) the rows not written, else all are; `fill`: the rest of each
    written row is -1, else untouched. Returns the first cell not ok per row."""
    first = ok.argmin(-1)
    written = iota(out.shape[1], out) <= first[:, None]
    minus = scalar(PLACEHOLDER, out, out.dtype)
    if skip is not None:                            # fill=False only: written & ~skip
        torch.where(written.gt_(skip[:, None]), values, out, out=out)
    elif rows is None:
        torch.where(written, values, minus if fill else out, out=out)
    elif fill:
        torch.where(rows[:, None], torch.where(written, values, minus), out, out=out)
    else:
        torch.where(written.logical_and_(rows[:, None]), values, out, out=out)
    return first


def flat_source(tokens: int, batch: int, like: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """An uninitialized [2, T + B] int source for `verify_flat`: row 0 [good (0/1) per token | 0 per
    request], row 1 [value per token | bonus per request]. Callers write it with `out=` forms."""
    return torch.empty((2, tokens + batch), device=like.device, dtype=dtype)


def source_tail(src: torch.Tensor, bonus) -> None:
    """Fill `flat_source` `src` but its good and value runs per token (one launch): the zeros and
    bonuses, rows [0 ; 1] * bonus in one launch that casts (a cat of mixed dtypes would copy each)."""
    torch.mul(constant("second_row", bonus), bonus, out=src[:, src.shape[1] - bonus.shape[0]:])


def verify_flat(out, cu, src, rows, fill, skip=None) -> None:
    """Verify a flattened batch from `flat_source` `src`: token t is good (accepted) and emits its value;
    a row's cell after its drafts is its bonus (never good). One gather gives both grids (see `emit`)."""
    tokens = src.shape[1] - cu.shape[0]
    grid = src[:, flat_grid(cu, tokens, out.shape[1])]
    emit(out, grid[0], low_bits(grid[1], out.dtype), rows, fill, skip)


def token_requests(cu: torch.Tensor, tokens: int) -> torch.Tensor:
    """The request of every token of a flattened batch (inclusive offsets)."""
    return torch.searchsorted(cu, iota(tokens, cu), right=True)


def greedy(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
           max_spec_len, output_token_ids):
    """See `specverify.oracles.rejection.greedy`."""
    batch = check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                         max_spec_len, output_token_ids, values=reads_values(cu_num_draft_tokens))
    if batch:
        verify_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                      output_token_ids)


def verify_greedy(drafts, target_argmax, bonus, cu, rows, out) -> torch.Tensor:
    """`greedy`'s verification of B > 0 rows into an int32 `out`; returns n, the draft count per row
    (int32). Each row's cells are one window of an int32 source [2, L] read from start(r): row 0 [good per
    token | 0 per request (and padding) | start(r) per request], row 1 [target id per token | bonus per
    request | unused]. A window's cells from n[r] on (later requests' tokens, or the source's tail) become
    [0; bonus] in the one `where` that masks them: never good, the bonus at n[r]. The ids are the low 32 bits
    of the int64 inputs (in int32 range by contract), so every part of the source but the good run is one
    int32 cat, the starts with it."""
    tokens, batch, width = drafts.shape[0], bonus.shape[0], out.shape[1]
    pad = max(0, width - 2 * batch)               # every window [start, start + width) lies in the source
    length = tokens + 2 * batch + pad
    src = torch.empty((2, length), device=bonus.device, dtype=torch.int32)
    torch.eq(drafts, target_argmax, out=src[0, :tokens])
    torch.cat((zeros(batch + 1 + pad, cu, torch.int32), cu[:-1], low_bits(target_argmax, torch.int32),
               low_bits(bonus, torch.int32)), out=src.view(-1)[tokens:length + tokens + batch])
    start = src[0, length - batch:]
    counts = torch.sub(cu, start)
    cells = torch.index_select(src.unfold(1, width, 1), 1, start)   # int32 ids: no cast (`index` would)
    grid = torch.where(iota(width, out) < counts[:, None], cells, src[:, tokens:tokens + batch, None])
    emit(out, grid[0], grid[1], rows, fill=False)
    return counts


def random(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
           recovered_token_ids, uniform_probs, is_greedy, output_token_ids, rule: str = RATIO):
    """See `specverify.oracles.rejection.random` (`rule`: the acceptance test, see `accepts`)."""
    batch, _ = check_random(draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                            target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids,
                            values=reads_values(cu_num_draft_tokens))
    if batch:
        verify_random(draft_token_ids, bonus_token_ids, cu_num_draft_tokens, draft_probs, target_probs,
                      recovered_token_ids, uniform_probs, is_greedy, output_token_ids, rule)


def verify_random(drafts, bonus, cu, draft_probs, target_probs, recovered, uniform, is_greedy, out, rule) -> None:
    """`random`'s verification of B > 0 rows, all int32 but the bonus: the source is int32 [2, T + 2B], row 0
    [good per token | 0 per request | start(r) per request], row 1 [emitted value per token | bonus per
    request | unused]. The good run is written in place; the values (accepted draft or recovered id) are
    made apart, so that everything after the good run is one int32 cat (one launch) with the starts."""
    tokens, batch = drafts.shape[0], bonus.shape[0]
    src = torch.empty((2, tokens + 2 * batch), device=bonus.device, dtype=torch.int32)
    accepted = accepts(*in_vocab(drafts, target_probs.shape[-1]), target_probs, draft_probs,
                       uniform, rule, out=src[0, :tokens])                    # good: 0/1 in place
    values = torch.where(as_flags(accepted), drafts, recovered)
    torch.cat((zeros(batch + 1, cu, torch.int32), cu[:-1], values, low_bits(bonus, torch.int32)),
              out=src.view(-1)[tokens:3 * batch + 2 * tokens])
    grid = src[:, flat_grid(cu, tokens, out.shape[1], src[0, tokens + batch:])]
    emit(out, grid[0], grid[1], None, fill=False, skip=is_greedy)


def random_strict(**fields) -> None:
    """`random` under dialect `strict` (see `specverify.oracles.rejection.random_strict`)."""
    random(**fields, rule=STRICT)


def random_strict_q0(**fields) -> None:
    """`random` under dialect `strict_q0` (see `specverify.oracles.rejection.random_strict_q0`)."""
    random(**fields, rule=STRICT_Q0)


def recovered(*, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids,
              max_spec_len=None):
    """See `specverify.oracles.rejection.recovered` (one program per token: the hint is not needed, but
    on a grid of equal requests (`request_grid`) each noise row is broadcast to its tokens, not copied)."""
    check_recovered(cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids,
                    values=reads_values(cu_num_draft_tokens), max_spec_len=max_spec_len)
    tokens = draft_token_ids.shape[0]
    if not tokens:
        return
    batch, vocab = inv_q.shape
    valid, safe = in_vocab(draft_token_ids, vocab)
    grid = request_grid(tokens, batch, max_spec_len)
    if grid is None:
        noise = inv_q.index_select(0, token_requests(cu_num_draft_tokens, tokens))
        scores = recovery_scores(target_probs, draft_probs, valid, safe, noise, lambda: at_drafts(noise, safe))
    else:
        valid, safe = valid.view(grid), safe.view(grid)
        scores = recovery_scores(target_probs.view(*grid, vocab), on_grid(draft_probs, grid), valid, safe,
                                 inv_q[:, None], lambda: inv_q.gather(1, safe), noise_owned=False)
    recovered_token_ids.copy_(first_max(scores, owned=True).view(tokens))


def on_grid(table, grid):
    """A [T, V] table (or None) as [B, S, V] rows (a view)."""
    return None if table is None else table.view(*grid, table.shape[-1])


def sample(*, draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
           is_greedy, uniform_probs, inv_q, output_token_ids):
    """See `specverify.oracles.rejection.sample`: one scores table (the target row for greedy tokens,
    the recovery scores for the others: the noise of a greedy row is 1), one `first_max`, one
    verification writing every row. A grid of equal requests (`request_grid`) broadcasts each noise row
    to its tokens."""
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
        vocab = inv_q.shape[1]
        # greedy rows take a row of ones as their noise: target * 1 is the target, bit for bit
        noise = torch.where(is_greedy[:, None], scalar(1.0, inv_q, inv_q.dtype), inv_q)
        valid, safe = in_vocab(drafts, vocab)
        grid = request_grid(tokens, batch, max_spec_len)
        if grid is None:
            request = token_requests(cu_num_draft_tokens, tokens)
            greedy_token = is_greedy[request]
            noise = noise.index_select(0, request)
            target, draft, uniform = target_probs, draft_probs, uniform_probs
            scores = recovery_scores(target, draft, valid, safe, noise, lambda: at_drafts(noise, safe), greedy_token)
        else:
            greedy_token = is_greedy[:, None].expand(grid)
            drafts, uniform = drafts.view(grid), uniform_probs.view(grid)
            valid, safe = valid.view(grid), safe.view(grid)
            target, draft = target_probs.view(*grid, vocab), on_grid(draft_probs, grid)
            scores = recovery_scores(target, draft, valid, safe, noise[:, None], lambda: noise.gather(1, safe),
                                     greedy_token)
        alternatives = first_max(scores, owned=True)
        accepted = torch.where(greedy_token, drafts == alternatives, accepts(valid, safe, target, draft, uniform))
    src = flat_source(tokens, batch, alternatives)
    src[0, :tokens].copy_(accepted.view(tokens))
    torch.where(accepted, drafts, alternatives, out=src[1, :tokens].view(accepted.shape))
    source_tail(src, bonus_token_ids)
    verify_flat(output_token_ids, cu_num_draft_tokens, src, None, fill=True)


def padded_source(values, bonus) -> torch.Tensor:
    """[B, 2K + 2] int64 [good (0/1) | 0 | values | bonus] for `emit_padded`, from values [B, K] and bonus
    [B] in one cat (one launch: a single dtype); the caller writes the good columns (the first K)."""
    batch, k = values.shape
    packed = torch.empty((batch, 2 * k + 2), device=bonus.device, dtype=torch.long)
    torch.cat((zeros(batch, bonus)[:, None], values, bonus[:, None]), 1, out=packed[:, k:])
    return packed


def emit_padded(packed, rows, output_token_ids, num_rejected_tokens, last_token_ids) -> None:
    """Verify padded rows from `padded_source` `packed` (see `emit`; slot K is the bonus, never good) and
    write the picked rows in full: one packed table serves both grids."""
    k = packed.shape[1] // 2 - 1
    cells = packed[:, k + 1:]
    first = emit(output_token_ids, packed[:, :k + 1], cells, rows, fill=True)
    if rows is None:
        num_rejected_tokens.copy_(k - first)          # k a Python scalar: no cached constant
        torch.gather(cells, 1, first[:, None], out=last_token_ids[:, None])
    else:
        torch.where(rows, torch.rsub(first, k), num_rejected_tokens,
                    out=num_rejected_tokens)
        torch.where(rows, cells.gather(1, first[:, None])[:, 0], last_token_ids, out=last_token_ids)


def greedy_padded(*, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                  num_rejected_tokens, last_token_ids):
    """See `specverify.oracles.rejection.greedy_padded`."""
    batch, _ = check_greedy_padded(draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                                   num_rejected_tokens, last_token_ids, values=reads_values(draft_token_ids))
    if batch:
        packed = padded_source(target_argmax, bonus_token_ids)
        torch.eq(draft_token_ids, target_argmax, out=packed[:, :draft_token_ids.shape[1]])
        emit_padded(packed, is_greedy, output_token_ids, num_rejected_tokens, last_token_ids)


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
        greedy_token = is_greedy[:, None].expand(batch, k)
        noise = torch.where(is_greedy[:, None], scalar(1.0, inv_q, inv_q.dtype), inv_q)[:, None, :]
        valid, safe = in_vocab(drafts, inv_q.shape[1])
        scores = recovery_scores(target_probs, draft_probs, valid, safe, noise,
                                 lambda: noise[:, 0].gather(1, safe), greedy_token)
        alternatives = first_max(scores, owned=True)
        accepted = torch.where(greedy_token, drafts == alternatives,
                               accepts(valid, safe, target_probs, draft_probs, uniform_probs))
    packed = padded_source(torch.where(accepted, drafts, alternatives), bonus_token_ids)
    packed[:, :k].copy_(accepted)
    emit_padded(packed, None, output_token_ids, num_rejected_tokens, last_token_ids)


def expand(*, x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded):
    """See `specverify.oracles.rejection.expand`."""
    value_from, value_to = check_expand(x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded,
                                        values=reads_values(cu_num_tokens))
    if num_tokens == 0:
        return
    request = token_requests(cu_num_tokens, num_tokens)
    replaced = torch.where(x == value_from.item(), value_to.item(), x)   # Python scalars keep x's dtype
    torch.index_select(replaced, 0, request, out=expanded)


# ---------------------------------------------------------------- rejection.chain_cdf

def accepted_drafts(candidates, target_probs, draft_probs, uniform_samples, q_range: bool) -> torch.Tensor:
    """[B, K] bool: the draft is an id in [0, V), f32(u * q) < p and (q_range) 0 < q <= 1. -1 and
    out-of-vocabulary drafts are rejected; their cells are never gathered (a safe index stands in)."""
    k, vocab = draft_probs.shape[1], target_probs.shape[-1]
    drafts = candidates[:, 1:]
    valid = (drafts >= 0) & (drafts < vocab)
    safe = torch.where(valid, drafts, scalar(0, drafts, drafts.dtype))[..., None]
    p = target_probs[:, :k].gather(-1, safe)[..., 0]
    q = draft_probs.gather(-1, safe)[..., 0]
    accepted = valid & (uniform_samples[:, :k] * q < p)
    return accepted & (q > 0) & (q <= 1) if q_range else accepted


def pick_rows(target_probs, draft_probs, num, q_range: bool) -> torch.Tensor:
    """[B, V] f32: each request's residual at its first rejected position num (p as it stands when
    num == K): max(p - q', 0) with a NaN difference as 0; q' = q where 0 <= q <= 1 else 0 (q_range),
    or q with only NaN zeroed. Four passes on the gathered draft row, each in place: q' by a NaN-dropping
    max with 0 (for q_range) and a select of q <= hi (NaN and what is out of range fail it; hi = NaN for
    the rows whose K drafts were all accepted, so their q' is 0 and p - 0 is p), the difference, and a
    NaN-dropping max with lo (0, or NaN for those rows: fmax(x, NaN) is x, so p stands)."""
    batch, k = draft_probs.shape[:2]
    rows = iota(batch, num)
    p = target_probs[rows, num]
    if k == 0:
        return p
    q = draft_probs[rows, num.clamp(max=k - 1)]
    rejected = (num < k)[:, None]
    zero, nan = scalar(0.0, q, q.dtype), constant("nan_float32", q)
    if q_range:
        torch.fmax(q, zero, out=q)
    hi = torch.where(rejected, scalar(1.0, q, q.dtype) if q_range else constant("inf_float32", q), nan)
    torch.where(q <= hi, q, zero, out=q)
    torch.sub(p, q, out=q)
    return torch.fmax(q, torch.where(rejected, zero, nan), out=q)


def first_crossing(res, u_final) -> torch.Tensor:
    """[B] int64: the lowest v whose running sum exceeds t = f32(u_final * total) (and whose cell is
    positive, which the exact contract implies), V - 1 when none does."""
    sums = res.cumsum(-1)
    t = u_final * sums[:, -1]
    hits = torch.gt(sums, t[:, None]).logical_and_(res > 0)
    first = hits.view(torch.uint8).argmax(-1)
    found = hits[iota(res.shape[0], first), first]
    return torch.where(found, first, res.shape[-1] - 1)


def chain_cdf(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
              accept_token_num, q_range: bool = True):
    """See `specverify.oracles.rejection.chain_cdf` (`q_range` False: dialect `snapshot`)."""
    batch, k, _ = validate(check_chain_cdf, candidates, target_probs, draft_probs, uniform_samples, uniform_final,
                           predicts, accept_index, accept_token_num, values=reads_values(candidates))
    if batch == 0:
        return
    accepted = accepted_drafts(candidates, target_probs, draft_probs, uniform_samples, q_range)
    stop = torch.cat((accepted, accepted.new_zeros((batch, 1))), 1)     # slot K is never accepted
    num = stop.to(torch.uint8).argmin(-1)
    token = first_crossing(pick_rows(target_probs, draft_probs, num, q_range), uniform_final)
    slots = iota(k + 1, num)
    written = slots <= num[:, None]
    values = torch.where(slots < num[:, None], torch.roll(candidates, -1, 1), token[:, None])
    grid = predicts.view(batch, k + 1)
    torch.where(written, values.to(torch.int32), grid, out=grid)
    flat = iota(batch, num)[:, None] * (k + 1) + slots
    torch.where(written, flat.to(torch.int32), accept_index, out=accept_index)
    accept_token_num.copy_(num)


def chain_cdf_snapshot(**fields) -> None:
    """`chain_cdf` under dialect `snapshot`."""
    chain_cdf(**fields, q_range=False)
