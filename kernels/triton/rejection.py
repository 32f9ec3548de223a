"""Triton kernels of the `rejection` family.

Two kernels serve every verification stage, in the flattened layout (`cu_num_draft_tokens`) and the
padded one ([B, K], any strides): `pick_kernel` (the lowest-index maximum of each draft token's score
row, swept in vocabulary tiles) and `verify_kernel` (one program per request: accept or reject its
drafts in order and write its row). A stage is one launch; the composites `sample` and `sample_padded`
are two (pick, then verify). Division is `div_rn` (Triton's `/` on f32 lowers to an approximate
division on NVIDIA GPUs).

Split picks: with few tokens, `split_plan` gives each token SPLIT programs, each sweeping one span of
whole tiles (about PROGRAMS_PER_SM programs per SM in all); with many tokens SPLIT = 1 and one program
sweeps the row. Split programs combine inside the launch through a self-cleaning workspace
(`workspace.py`): each publishes its best as one int64 key, atomic_max into the token's slot, then
counts itself in; the program that arrives last takes the key (resetting the slot), writes the index
and resets the counter. Key = (order-preserving int of the f32 score, -0.0 as +0.0) << 32 |
(0x7FFFFFFF - index): the larger score wins, then the lower index; a span without a non-NaN score
publishes NO_KEY, and a token whose final key is NO_KEY (every score NaN) gives 0.

`rejection.chain_cdf` (the last section): one launch, one program per request. A program decides all K drafts
at once (one vector of K + 1 lanes), finds its first rejection, then sweeps the one row it picks from in tiles of
up to CDF_BLOCK_V: once for the total, once for the running sum (`tl.cumsum` per tile plus the carried sum of the
tiles before), keeping the first cell whose running sum exceeds t = u_final * total. A row that fits one tile is
loaded once (ONE_TILE). Every offset is int64, so rows past 2**31 elements are addressed correctly.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from specverify.kernels.triton.launch import cdiv, launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared, scratch
from specverify.kernels.triton.workspace import NO_KEY, workspace
from specverify.kernels.validation import reads_values, validate
from specverify.oracles.rejection import (check_chain_cdf, check_expand, check_greedy, check_greedy_padded,
                                          check_random, check_recovered, check_sample, check_sample_padded)

# pick_kernel's MODE: what a token's score row is; verify_kernel's MODE: how drafts are accepted (or BY_ROW)
ARGMAX, RECOVER, BY_ROW = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
GREEDY, RANDOM = tl.constexpr(0), tl.constexpr(1)
# verify_kernel's RULE (the RANDOM acceptance test): the record's f64(f32(p / q)) >= u; dialect `strict`'s
# f32(f32(u) * q) < p with q in (0, 1]; `strict_q0`'s without the range test
RATIO, STRICT, STRICT_Q0 = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
# verify_kernel's ROWS: which rows it writes
ALL_ROWS, GREEDY_ROWS, RANDOM_ROWS = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
BLOCK_V = 2048          # the widest vocabulary tile (a pick program over it has 8 warps, a narrower one 4)
PROGRAMS_PER_SM = 8     # split picks aim at this many programs per SM
MIN_BLOCK = 256         # the narrowest tile a split pick shrinks to (CUDA)
EXPAND_ROWS = 32        # requests per program of expand
EXPAND_ONE_ROW = 8      # expand batches up to this size get one request per program, one tile of num_tokens
CPU_PROGRAMS, CPU_MIN_BLOCK = 8, 16     # the same under the interpreter: small tables split too, and a row
                                        # of 8193 swept by 2 to 7 tokens gives a program several 2048-wide tiles
KEY_NONE = tl.constexpr(NO_KEY)


@triton.jit
def request_span(cu_ptr, r):
    """[start, end) of request r's draft tokens, from inclusive offsets."""
    start = tl.load(cu_ptr + r - 1, mask=r > 0, other=0)
    end = tl.load(cu_ptr + r)
    return start, end


@triton.jit
def request_of(cu_ptr, t, batch, BLOCK_B: tl.constexpr):
    """The request owning flattened token t: the number of requests that end at or before it."""
    r = 0
    for s in range(0, batch, BLOCK_B):
        offs = s + tl.arange(0, BLOCK_B)
        ends = tl.load(cu_ptr + offs, mask=offs < batch, other=2147483647)
        r += tl.sum((ends <= t).to(tl.int32), axis=0)
    return r


@triton.jit
def row_is_greedy(is_greedy_ptr, is_greedy_stride, r, HAS_MASK: tl.constexpr):
    if HAS_MASK:
        return tl.load(is_greedy_ptr + r * is_greedy_stride) != 0
    return r >= 0


@triton.jit
def publish(out_ptr, keys_ptr, counts_ptr, t, best, best_index, vocab, split):
    """Combine one span's best (score, index; index == vocab: none) into token t's result: see the
    module docstring. The last of the token's `split` programs writes out[t] and resets the slots."""
    bits = tl.where(best == 0, 0.0, best).to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key = (ordered.to(tl.int64) << 32) | (0x7FFFFFFF - best_index).to(tl.int64)
    tl.atomic_max(keys_ptr + t, tl.where(best_index == vocab, KEY_NONE, key))
    last = tl.atomic_add(counts_ptr + t, 1) == split - 1
    final = tl.atomic_xchg(keys_ptr + t, KEY_NONE, mask=last)
    index = tl.where(final == KEY_NONE, 0, 0x7FFFFFFF - (final & 0x7FFFFFFF))
    tl.store(out_ptr + t, index.to(out_ptr.dtype.element_ty), mask=last)
    tl.store(counts_ptr + t, 0, mask=last)


@launcher
@triton.jit
def pick_kernel(out_ptr, target_ptr, t_row, t_pos, t_v, draft_probs_ptr, dp_row, dp_pos, dp_v,
                draft_ptr, d_row, d_pos, inv_q_ptr, q_row, q_v, cu_ptr, is_greedy_ptr, g_stride,
                keys_ptr, counts_ptr, batch, k, vocab, span, split, MODE: tl.constexpr, FLAT: tl.constexpr,
                HAS_DRAFT_PROBS: tl.constexpr, HAS_MASK: tl.constexpr, SPLIT: tl.constexpr,
                BLOCK_B: tl.constexpr, BLOCK: tl.constexpr):
    """out[t] = first maximum of token t's scores: target_probs (ARGMAX), residual * inv_q (RECOVER), or
    by its row's is_greedy (BY_ROW). NaN never wins; +inf does; no winner gives 0. Token t is (0, t)
    in a flattened batch, (t // k, t % k) in a padded one. Program (t, s) sweeps [s * span, (s + 1) *
    span) of the vocabulary when SPLIT (then `publish` combines), all of it otherwise. Each lane keeps its
    own best over the tiles (a later cell only when strictly larger, or the first non-NaN one), and the
    lanes are reduced once after the sweep: no cross-lane reduction inside the loop."""
    t = tl.program_id(0).to(tl.int64)
    if SPLIT:
        lo = tl.program_id(1) * span
        hi = tl.minimum(lo + span, vocab)
    else:
        lo, hi = 0, vocab
    if FLAT:
        row, pos = 0, t
        r = request_of(cu_ptr, t, batch, BLOCK_B)
    else:
        row, pos = t // k, t % k
        r = row
    recover = row_is_greedy(is_greedy_ptr, g_stride, r, HAS_MASK) == 0
    draft = tl.load(draft_ptr + row * d_row + pos * d_pos).to(tl.int64)
    best = tl.full([BLOCK], -float("inf"), tl.float32)     # each lane's best so far (index vocab: none yet)
    best_index = tl.full([BLOCK], vocab, tl.int32)
    for start in range(lo, hi, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        live = offs < hi
        column = offs.to(tl.int64)         # a column times a stride may pass 2**31
        score = tl.load(target_ptr + row * t_row + pos * t_pos + column * t_v, mask=live, other=0.0)
        if MODE != ARGMAX:
            if HAS_DRAFT_PROBS:
                q = tl.load(draft_probs_ptr + row * dp_row + pos * dp_pos + column * dp_v, mask=live, other=0.0)
                diff = score - q
                prob = tl.where(diff < 0, 0.0, diff)
            else:
                prob = tl.where(offs == draft, 0.0, score)
            noise = tl.load(inv_q_ptr + r * q_row + column * q_v, mask=live, other=0.0)
            if MODE == RECOVER:
                score = prob * noise
            else:
                score = tl.where(recover, prob * noise, score)
        score = tl.where(live, score, float("nan"))
        take = (score > best) | ((score == best) & (best_index == vocab))   # a lane's first max; NaN never
        best = tl.where(take, score, best)
        best_index = tl.where(take, offs, best_index)
    top = tl.max(best, axis=0)
    top_index = tl.min(tl.where(best == top, best_index, vocab), axis=0)
    if SPLIT:
        publish(out_ptr, keys_ptr, counts_ptr, t, top, top_index, vocab, split)
    else:
        tl.store(out_ptr + t, tl.where(top_index == vocab, 0, top_index).to(out_ptr.dtype.element_ty))


@launcher
@triton.jit
def verify_kernel(out_ptr, o_row, o_col, rejected_ptr, rejected_stride, last_ptr, last_stride,
                  draft_ptr, d_row, d_pos, alt_ptr, a_row, a_pos, bonus_ptr, bonus_stride,
                  target_ptr, t_row, t_pos, t_v, draft_probs_ptr, dp_row, dp_pos, dp_v, u_ptr, u_row, u_pos,
                  cu_ptr, is_greedy_ptr, g_stride, k, vocab, columns,
                  MODE: tl.constexpr, ROWS: tl.constexpr, FLAT: tl.constexpr, FILL: tl.constexpr,
                  PADDED: tl.constexpr, HAS_DRAFT_PROBS: tl.constexpr, HAS_MASK: tl.constexpr,
                  BLOCK: tl.constexpr, RULE: tl.constexpr):
    """Verify request r's drafts in order: accept while the draft equals its alternative (GREEDY) or
    passes the RULE's test (RANDOM: q > 0 and f64(f32(p / q)) >= u, or a STRICT one); emit accepted drafts,
    the alternative at the first reject, the bonus after none. Writes the emitted prefix of the selected rows, the rest of the row as
    -1 (FILL), and the padded counts (PADDED). Flattened tokens: (0, start + pos); padded: (r, pos)."""
    r = tl.program_id(0).to(tl.int64)
    if FLAT:
        start, end = request_span(cu_ptr, r)
        row, first_pos, count = 0, start.to(tl.int64), end - start
    else:
        row, first_pos, count = r, 0, k
    offs = tl.arange(0, BLOCK)
    live = offs < count
    pos = first_pos + offs.to(tl.int64)      # a position times a stride may pass 2**31
    draft = tl.load(draft_ptr + row * d_row + pos * d_pos, mask=live, other=-1).to(tl.int64)
    alt = tl.load(alt_ptr + row * a_row + pos * a_pos, mask=live, other=0).to(tl.int64)
    greedy_row = row_is_greedy(is_greedy_ptr, g_stride, r, HAS_MASK)
    accept = draft == alt
    if MODE != GREEDY:
        valid = live & (draft >= 0) & (draft < vocab)
        safe = tl.where(valid, draft, 0)
        p = tl.load(target_ptr + row * t_row + pos * t_pos + safe * t_v, mask=valid, other=0.0)
        if HAS_DRAFT_PROBS:
            q = tl.load(draft_probs_ptr + row * dp_row + pos * dp_pos + safe * dp_v, mask=valid, other=0.0)
        else:
            q = tl.full([BLOCK], 1.0, tl.float32)
        u = tl.load(u_ptr + row * u_row + pos * u_pos, mask=live, other=2.0)
        if RULE == RATIO:
            ratio = tl.math.div_rn(p, tl.where(q > 0, q, 1.0))
            random_accept = valid & (q > 0) & (ratio.to(tl.float64) >= u)
        else:
            random_accept = valid & (u.to(tl.float32) * q < p)      # u rounded to nearest f32, one product
            if RULE == STRICT:
                random_accept = random_accept & (q > 0) & (q <= 1.0)
        if MODE == RANDOM:
            accept = random_accept
        else:
            accept = tl.where(greedy_row, accept, random_accept)
    first = tl.min(tl.where(live & (accept == 0), offs, BLOCK), axis=0)
    emitted = tl.where(first == BLOCK, count + 1, first + 1)
    bonus = tl.load(bonus_ptr + r * bonus_stride)
    values = tl.where(offs < count, tl.where(accept, draft, alt), bonus)
    if ROWS == GREEDY_ROWS:
        write = greedy_row
    elif ROWS == RANDOM_ROWS:
        write = greedy_row == 0
    else:
        write = r >= 0
    out_row = out_ptr + r * o_row + offs.to(tl.int64) * o_col
    if FILL:
        tl.store(out_row, tl.where(offs < emitted, values, -1).to(out_ptr.dtype.element_ty),
                 mask=offs < tl.where(write, columns, 0))
    else:
        tl.store(out_row, values.to(out_ptr.dtype.element_ty), mask=offs < tl.where(write, emitted, 0))
    if PADDED:
        last = tl.sum(tl.where(offs == emitted - 1, values, 0), axis=0)
        tl.store(rejected_ptr + r * rejected_stride, (columns - emitted).to(tl.int64), mask=write)
        tl.store(last_ptr + r * last_stride, last, mask=write)


@launcher
@triton.jit
def expand_kernel(out_ptr, x_ptr, cu_ptr, batch, replace_from, replace_to, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                  ONE_STEP: tl.constexpr):
    """expanded[start(r):end(r)] = x[r], or replace_to where x[r] == replace_from; no cap per request.
    ROWS requests per program, their spans written BLOCK tokens at a time up to the longest of them (one
    program per request would make B programs of a few stores each); in one step, with no loop, when
    ONE_STEP (BLOCK bounds every span)."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = r < batch
    start = tl.load(cu_ptr + r - 1, mask=live & (r > 0), other=0)
    end = tl.load(cu_ptr + r, mask=live, other=0)
    x = tl.load(x_ptr + r, mask=live)
    value = tl.where(x == replace_from, replace_to, x).to(out_ptr.dtype.element_ty)
    value = tl.broadcast_to(value[:, None], [ROWS, BLOCK])
    if ONE_STEP:
        expand_tile(out_ptr, value, start, end, live, 0, BLOCK)
    else:
        for s in range(0, tl.max(end - start, axis=0), BLOCK):
            expand_tile(out_ptr, value, start, end, live, s, BLOCK)


@triton.jit
def expand_tile(out_ptr, value, start, end, live, s, BLOCK: tl.constexpr):
    """Tokens [s, s + BLOCK) of each live request's span [start, end) set to its value."""
    offs = start[:, None] + s + tl.arange(0, BLOCK)[None, :]
    tl.store(out_ptr + offs, value, mask=live[:, None] & (offs < end[:, None]))


def mask_args(is_greedy, fallback):
    """(pointer, stride) of is_greedy as bytes; a dummy pointer when it is None."""
    if is_greedy is None:
        return fallback, 0
    return is_greedy.view(torch.uint8), is_greedy.stride(0)


def table_args(probs, flat: bool):
    """(row, position, vocab) strides of a [T, V] (flat: tokens are positions of row 0) or [B, K, V]
    table; zeros for None."""
    if probs is None:
        return 0, 0, 0
    return (0, *probs.stride()) if flat else tuple(probs.stride())


def ids_args(ids, flat: bool):
    """(row, position) strides of [T] (flat: tokens addressed as positions of row 0) or [B, K] ids."""
    return (0, ids.stride(0)) if flat else tuple(ids.stride())


@functools.cache
def program_budget(device: torch.device) -> tuple[int, int]:
    """(programs a split pick aims at, its narrowest tile) on `device`."""
    if device.type != "cuda":
        return CPU_PROGRAMS, CPU_MIN_BLOCK
    return PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count, MIN_BLOCK


def split_plan(tokens: int, vocab: int, programs: int, min_block: int) -> tuple[int, int, int]:
    """(SPLIT, tile, span): each of `tokens` rows of `vocab` scores is swept by SPLIT programs of `span`
    elements (whole tiles), about `programs` in all. SPLIT = 1 (span = vocab, tiles of up to BLOCK_V)
    once tokens >= programs, so SPLIT > 1 needs fewer than `programs` token slots."""
    widest = min(BLOCK_V, next_power_of_2(vocab))
    wanted = cdiv(programs, tokens)
    if wanted <= 1:
        return 1, widest, vocab
    tile = min(widest, max(min_block, next_power_of_2(cdiv(vocab, wanted))))
    tiles = cdiv(vocab, tile)
    per = cdiv(tiles, min(wanted, tiles))
    return cdiv(tiles, per), tile, per * tile


def pick(out, target, draft_probs, drafts, inv_q, cu, is_greedy, mode, flat: bool):
    """Launch pick_kernel over every draft token (see there), split by `split_plan`."""
    tokens = out.numel()
    if tokens == 0:
        return
    programs, min_block = program_budget(out.device)
    split, tile, span = split_plan(tokens, target.shape[-1], programs, min_block)
    keys, counts = workspace(out.device, programs) if split > 1 else (out, out)
    batch, k = (len(cu), 1) if flat else tuple(drafts.shape)
    vocab = target.shape[-1]
    t_row, t_pos, t_v = table_args(target, flat)
    dp_row, dp_pos, dp_v = table_args(draft_probs, flat)
    d_row, d_pos = ids_args(drafts, flat)
    q_row, q_v = inv_q.stride() if inv_q is not None else (0, 0)
    mask, g_stride = mask_args(is_greedy, drafts)
    pick_kernel[(tokens, split)](
        out, target, t_row, t_pos, t_v, target if draft_probs is None else draft_probs, dp_row, dp_pos, dp_v,
        drafts, d_row, d_pos, target if inv_q is None else inv_q, q_row, q_v, drafts if cu is None else cu,
        mask, g_stride, keys, counts, batch, k, vocab, span, split, MODE=mode.value, FLAT=flat,
        HAS_DRAFT_PROBS=draft_probs is not None, HAS_MASK=is_greedy is not None, SPLIT=split > 1,
        BLOCK_B=1024, BLOCK=tile, num_warps=8 if tile >= BLOCK_V else 4)


def verify(out, drafts, alternatives, bonus, is_greedy, mode, rows, *, cu=None, target=None, draft_probs=None,
           uniform=None, fill=False, rejected=None, last=None, rule=RATIO):
    """Launch verify_kernel over every request (see there); flattened when `cu` is given."""
    flat = cu is not None
    batch = len(cu) if flat else drafts.shape[0]
    if batch == 0:
        return
    columns = out.shape[1]
    k = 0 if flat else drafts.shape[1]
    t_row, t_pos, t_v = table_args(target, flat)
    dp_row, dp_pos, dp_v = table_args(draft_probs, flat)
    u_row, u_pos = ids_args(uniform, flat) if uniform is not None else (0, 0)
    mask, g_stride = mask_args(is_greedy, drafts)
    padded = rejected is not None
    verify_kernel[(batch,)](
        out, out.stride(0), out.stride(1), rejected if padded else out, rejected.stride(0) if padded else 0,
        last if padded else out, last.stride(0) if padded else 0,
        drafts, *ids_args(drafts, flat), alternatives, *ids_args(alternatives, flat), bonus, bonus.stride(0),
        drafts if target is None else target, t_row, t_pos, t_v,
        drafts if draft_probs is None else draft_probs, dp_row, dp_pos, dp_v,
        drafts if uniform is None else uniform, u_row, u_pos, drafts if cu is None else cu, mask, g_stride,
        k, 1 if target is None else target.shape[-1], columns,
        MODE=mode.value, ROWS=rows.value, FLAT=flat, FILL=fill, PADDED=padded, HAS_DRAFT_PROBS=draft_probs is not None,
        HAS_MASK=is_greedy is not None, BLOCK=next_power_of_2(columns), RULE=rule.value)


@prepared
def greedy(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
           max_spec_len, output_token_ids):
    """See `specverify.oracles.rejection.greedy`. One launch."""
    validate(check_greedy, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
             max_spec_len, output_token_ids, values=reads_values(cu_num_draft_tokens))
    verify(output_token_ids, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, GREEDY, GREEDY_ROWS,
           cu=cu_num_draft_tokens)


@prepared
def random(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
           recovered_token_ids, uniform_probs, is_greedy, output_token_ids, rule=RATIO):
    """See `specverify.oracles.rejection.random` (`rule`: verify_kernel's RULE). One launch."""
    validate(check_random, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
             target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids,
             values=reads_values(cu_num_draft_tokens))
    verify(output_token_ids, draft_token_ids, recovered_token_ids, bonus_token_ids, is_greedy, RANDOM, RANDOM_ROWS,
           cu=cu_num_draft_tokens, target=target_probs, draft_probs=draft_probs, uniform=uniform_probs, rule=rule)


def random_strict(**fields) -> None:
    """`random` under dialect `strict` (see `specverify.oracles.rejection.random_strict`). One launch."""
    random(**fields, rule=STRICT)


def random_strict_q0(**fields) -> None:
    """`random` under dialect `strict_q0` (see `specverify.oracles.rejection.random_strict_q0`). One launch."""
    random(**fields, rule=STRICT_Q0)


@prepared
def recovered(*, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids,
              max_spec_len=None):
    """See `specverify.oracles.rejection.recovered`. One launch, one program per token (the host hint
    `max_spec_len` is checked, not needed)."""
    validate(check_recovered, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
             recovered_token_ids, max_spec_len, values=reads_values(cu_num_draft_tokens))
    pick(recovered_token_ids, target_probs, draft_probs, draft_token_ids, inv_q, cu_num_draft_tokens, None,
         RECOVER, flat=True)


@prepared
def sample(*, draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
           is_greedy, uniform_probs, inv_q, output_token_ids):
    """See `specverify.oracles.rejection.sample`. Two launches: pick (the argmax of greedy rows, the
    recovered token of the others), then verify (every row written in full)."""
    validate(check_sample, draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
             bonus_token_ids, is_greedy, uniform_probs, inv_q, output_token_ids,
             values=reads_values(cu_num_draft_tokens))
    alternatives = scratch(draft_token_ids.shape[0], torch.int64, draft_token_ids.device)
    pick(alternatives, target_probs, draft_probs, draft_token_ids, inv_q, cu_num_draft_tokens, is_greedy,
         ARGMAX if is_greedy is None else BY_ROW, flat=True)
    verify(output_token_ids, draft_token_ids, alternatives, bonus_token_ids, is_greedy,
           GREEDY if is_greedy is None else BY_ROW, ALL_ROWS, cu=cu_num_draft_tokens, target=target_probs,
           draft_probs=draft_probs, uniform=uniform_probs, fill=True)


@prepared
def greedy_padded(*, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                  num_rejected_tokens, last_token_ids):
    """See `specverify.oracles.rejection.greedy_padded`. One launch."""
    validate(check_greedy_padded, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
             num_rejected_tokens, last_token_ids, values=reads_values(draft_token_ids))
    verify(output_token_ids, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, GREEDY, GREEDY_ROWS,
           fill=True, rejected=num_rejected_tokens, last=last_token_ids)


@prepared
def sample_padded(*, draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy, uniform_probs,
                  inv_q, output_token_ids, num_rejected_tokens, last_token_ids):
    """See `specverify.oracles.rejection.sample_padded`. Two launches, as `sample`."""
    validate(check_sample_padded, draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy, uniform_probs,
             inv_q, output_token_ids, num_rejected_tokens, last_token_ids, values=reads_values(draft_token_ids))
    alternatives = scratch(draft_token_ids.shape, torch.int64, draft_token_ids.device)
    pick(alternatives, target_probs, draft_probs, draft_token_ids, inv_q, None, is_greedy,
         ARGMAX if is_greedy is None else BY_ROW, flat=False)
    verify(output_token_ids, draft_token_ids, alternatives, bonus_token_ids, is_greedy,
           GREEDY if is_greedy is None else BY_ROW, ALL_ROWS, target=target_probs, draft_probs=draft_probs,
           uniform=uniform_probs, fill=True, rejected=num_rejected_tokens, last=last_token_ids)


def one_row_tile(num_tokens) -> int:
    """Expand's tile for one request per program: num_tokens (which bounds every span) rounded up to a power of
    two, at most 1024 (a longer span loops)."""
    return min(next_power_of_2(max(int(num_tokens), 1)), 1024)


@prepared
def expand(*, x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded):
    """See `specverify.oracles.rejection.expand`. One launch: EXPAND_ROWS requests per program in tiles of 8
    tokens, or up to EXPAND_ONE_ROW requests one per program in one tile of num_tokens (which bounds every span;
    at most 1024: past it, a span loops over tiles), with no loop up to 1024 tokens."""
    value_from, value_to = validate(check_expand, x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded,
                                    values=reads_values(cu_num_tokens))
    if len(x) == 0:
        return
    rows, block = (1, one_row_tile(num_tokens)) if len(x) <= EXPAND_ONE_ROW else (EXPAND_ROWS, 8)
    expand_kernel[(cdiv(len(x), rows),)](expanded, x.contiguous(), cu_num_tokens.contiguous(), len(x),
                                         value_from.item(), value_to.item(), ROWS=rows, BLOCK=block,
                                         ONE_STEP=rows == 1 and int(num_tokens) <= block)


# ---------------------------------------------------------------- rejection.chain_cdf

CDF_BLOCK_V = 1024     # the widest vocabulary tile


@triton.jit
def residual_tile(p_row, q_row, t_v, q_v, v, vocab, q_end, Q_RANGE: tl.constexpr):
    """One tile of the pick row: max(p - q', 0) with NaN as 0 where q_end == vocab (a rejection: the
    draft row is read), p as it stands where q_end == 0."""
    p = tl.load(p_row + v * t_v, mask=v < vocab, other=0.0)
    q = tl.load(q_row + v * q_v, mask=v < q_end, other=0.0)
    if Q_RANGE:
        kept = (q >= 0) & (q <= 1.0)
    else:
        kept = q == q
    diff = p - tl.where(kept, q, 0.0)
    res = tl.where(diff > 0, diff, 0.0)
    return tl.where(q_end > 0, res, p)


@launcher
@triton.jit
def chain_cdf_kernel(pred_ptr, idx_ptr, idx_row, idx_col, num_ptr, num_stride, cand_ptr, c_row, c_col,
                     target_ptr, t_b, t_pos, t_v, draft_ptr, q_b, q_pos, q_v, u_ptr, u_b, u_pos, uf_ptr, uf_stride,
                     k, vocab, Q_RANGE: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK: tl.constexpr,
                     ONE_TILE: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    slot = tl.arange(0, BLOCK_K)
    live = slot < k
    draft = tl.load(cand_ptr + b * c_row + (slot + 1) * c_col, mask=live, other=-1)
    valid = live & (draft >= 0) & (draft < vocab)
    safe = tl.where(valid, draft, 0)
    p = tl.load(target_ptr + b * t_b + slot * t_pos + safe * t_v, mask=valid, other=0.0)
    q = tl.load(draft_ptr + b * q_b + slot * q_pos + safe * q_v, mask=valid, other=0.0)
    u = tl.load(u_ptr + b * u_b + slot * u_pos, mask=live, other=1.0)
    accept = valid & (u * q < p)
    if Q_RANGE:
        accept = accept & (q > 0) & (q <= 1.0)
    num = tl.min(tl.where(live & (accept == 0), slot, k), axis=0).to(tl.int64)
    q_end = tl.where(num < k, vocab, 0)
    p_row = target_ptr + b * t_b + num * t_pos
    q_row = draft_ptr + b * q_b + tl.minimum(num, k - 1) * q_pos
    if ONE_TILE:                          # the row fits one tile: load it once
        v = tl.arange(0, BLOCK).to(tl.int64)
        res = residual_tile(p_row, q_row, t_v, q_v, v, vocab, q_end, Q_RANGE)
        sums = tl.cumsum(res, axis=0)
        t = tl.load(uf_ptr + b * uf_stride) * tl.sum(res, axis=0)
        found = tl.min(tl.where((v < vocab) & (sums > t) & (res > 0), v, vocab), axis=0)
    else:
        total = 0.0
        for s in range(0, vocab, BLOCK):
            v = s + tl.arange(0, BLOCK).to(tl.int64)
            total += tl.sum(residual_tile(p_row, q_row, t_v, q_v, v, vocab, q_end, Q_RANGE), axis=0)
        t = tl.load(uf_ptr + b * uf_stride) * total
        carry = total * 0.0
        found = tl.full([], 0, tl.int64) + vocab
        for s in range(0, vocab, BLOCK):
            v = s + tl.arange(0, BLOCK).to(tl.int64)
            res = residual_tile(p_row, q_row, t_v, q_v, v, vocab, q_end, Q_RANGE)
            sums = tl.cumsum(res, axis=0) + carry
            found = tl.minimum(found, tl.min(tl.where((v < vocab) & (sums > t) & (res > 0), v, vocab), axis=0))
            carry += tl.sum(res, axis=0)
    token = tl.where(found < vocab, found, vocab - 1)
    written = slot <= num
    base = b * (k + 1)
    tl.store(pred_ptr + base + slot, tl.where(slot < num, draft, token).to(tl.int32), mask=written)
    tl.store(idx_ptr + b * idx_row + slot * idx_col, (base + slot).to(tl.int32), mask=written)
    tl.store(num_ptr + b * num_stride, num.to(tl.int32))


@prepared
def chain_cdf(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
              accept_token_num, q_range: bool = True):
    """See `specverify.oracles.rejection.chain_cdf` (`q_range` False: dialect `snapshot`). One launch."""
    batch, k, vocab = validate(check_chain_cdf, candidates, target_probs, draft_probs, uniform_samples,
                               uniform_final, predicts, accept_index, accept_token_num,
                               values=reads_values(candidates))
    if batch == 0:
        return
    chain_cdf_kernel[(batch,)](
        predicts, accept_index, *accept_index.stride(), accept_token_num, accept_token_num.stride(0),
        candidates, *candidates.stride(), target_probs, *target_probs.stride(), draft_probs, *draft_probs.stride(),
        uniform_samples, *uniform_samples.stride(), uniform_final, uniform_final.stride(0), k, vocab,
        Q_RANGE=q_range, BLOCK_K=next_power_of_2(k + 1), BLOCK=min(CDF_BLOCK_V, next_power_of_2(vocab)),
        ONE_TILE=vocab <= CDF_BLOCK_V)


def chain_cdf_snapshot(**fields) -> None:
    """`chain_cdf` under dialect `snapshot`. One launch."""
    chain_cdf(**fields, q_range=False)
