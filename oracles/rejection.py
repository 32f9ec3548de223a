"""Oracles of the `rejection` family: verification of draft tokens against the target model.

Loop-level and obviously correct; every function follows destination passing (outputs are keyword
arguments written in place) and refuses invalid input with an error naming the field.

`rejection.chain_cdf` (the last section) is the chain sampler that picks its replacement (or bonus) token by an
inverse-CDF walk over the residual, in the padded layout: each request is walked position by position; the
residual is built cell by cell in f32 (element-wise, so in any order) and its running sum is taken left to right.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles.arguments import (dtype_name, largest_count, need_at_least, need_at_most, need_chain_tables,
                                          need_dtype, need_hint, need_inclusive_offsets, need_int, need_ndim,
                                          need_shape)

PLACEHOLDER = -1
INT32_MAX = 2**31 - 1

# where the flattened stages take their sizes from (named in shape errors)
B_FLAT = "B = len(cu_num_draft_tokens)"
T_FLAT = "T = len(draft_token_ids)"
V_FROM = "V = target_probs.shape[-1]"
BK_PADDED = "B, K = draft_token_ids.shape"


def check_batch(draft_token_ids, cu_num_draft_tokens, max_spec_len, output_token_ids, is_greedy,
                bonus_token_ids, values=True) -> int:
    """Checks shared by the flattened-layout stages; returns B. `values=False` skips the checks that
    read array contents (the production kernels skip them on CUDA outside checked mode)."""
    need_dtype("draft_token_ids", draft_token_ids, "int32")
    need_ndim("draft_token_ids", draft_token_ids, 1)
    need_dtype("cu_num_draft_tokens", cu_num_draft_tokens, "int32")
    need_ndim("cu_num_draft_tokens", cu_num_draft_tokens, 1)
    need_int("max_spec_len", max_spec_len)
    batch = len(cu_num_draft_tokens)
    need_dtype("output_token_ids", output_token_ids, "int32")
    need_shape("output_token_ids", output_token_ids, (batch, max_spec_len + 1), f"{B_FLAT}, S = max_spec_len")
    if is_greedy is not None:
        need_dtype("is_greedy", is_greedy, "bool")
        need_shape("is_greedy", is_greedy, (batch,), B_FLAT)
    need_dtype("bonus_token_ids", bonus_token_ids, "int64")
    need_shape("bonus_token_ids", bonus_token_ids, (batch,), B_FLAT)
    if values:
        need_inclusive_offsets("cu_num_draft_tokens", cu_num_draft_tokens, len(draft_token_ids), T_FLAT)
        counts = cu_num_draft_tokens[1:] - cu_num_draft_tokens[:-1]
        need_at_most("cu_num_draft_tokens", cu_num_draft_tokens[:1], max_spec_len,
                     "draft tokens per request <= max_spec_len")
        need_at_most("cu_num_draft_tokens", counts, max_spec_len, "draft tokens per request <= max_spec_len")
        need_at_least("draft_token_ids", draft_token_ids, PLACEHOLDER)
        need_at_least("bonus_token_ids", bonus_token_ids, PLACEHOLDER)
        need_at_most("bonus_token_ids", bonus_token_ids, INT32_MAX, "ids fit the int32 output")
    return batch


def check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                 max_spec_len, output_token_ids, values=True) -> int:
    batch = check_batch(draft_token_ids, cu_num_draft_tokens, max_spec_len, output_token_ids, is_greedy,
                        bonus_token_ids, values)
    need_dtype("target_argmax", target_argmax, "int64")
    need_shape("target_argmax", target_argmax, tuple(draft_token_ids.shape), T_FLAT)
    if values:
        need_at_least("target_argmax", target_argmax, 0)
        need_at_most("target_argmax", target_argmax, INT32_MAX, "ids fit the int32 output")
    return batch


def greedy(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
           max_spec_len, output_token_ids):
    """Greedy verification: emit the target's argmax until the first draft that differs from it
    (that argmax included); a row whose drafts all match also emits its bonus token. Rows that are not
    greedy are left untouched, and so is every slot after what a row emits."""
    batch = check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                         max_spec_len, output_token_ids)
    for r in range(batch):
        if is_greedy is not None and not is_greedy[r]:
            continue
        start, end = span(cu_num_draft_tokens, r)
        drafts, argmax = draft_token_ids[start:end], target_argmax[start:end]
        emit_row(output_token_ids[r], drafts, argmax, lambda pos: drafts[pos] == argmax[pos], bonus_token_ids[r])


def span(cu_num_draft_tokens, r) -> tuple[int, int]:
    """[start, end) of request r's tokens, from inclusive offsets."""
    return (0 if r == 0 else int(cu_num_draft_tokens[r - 1])), int(cu_num_draft_tokens[r])


def emit_row(out_row, drafts, alternatives, accept, bonus) -> int:
    """Verify one request's drafts in order: an accepted draft is emitted; the first rejected one is
    replaced by its alternative and ends the row; a row with nothing rejected ends with its bonus.
    Returns the number of tokens emitted (>= 1)."""
    for pos in range(len(drafts)):
        if accept(pos):
            out_row[pos] = drafts[pos]
        else:
            out_row[pos] = alternatives[pos]
            return pos + 1
    out_row[len(drafts)] = bonus
    return len(drafts) + 1

def check_tables(target_probs, draft_probs, lead: tuple[int, ...], lead_from: str) -> int:
    """float32 [*lead, V] target probabilities (V >= 1) and, when given, draft probabilities of the same
    shape; returns V. `lead_from` says where the leading sizes come from."""
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        if probs is None and name == "draft_probs":
            continue
        need_dtype(name, probs, "float32")
        need_ndim(name, probs, len(lead) + 1)
        if tuple(probs.shape[:-1]) != lead or probs.shape[-1] < 1 or probs.shape != target_probs.shape:
            raise ValueError(f"{name}: shape must be [{', '.join(map(str, lead))}, V >= 1] ({lead_from}; "
                             f"{V_FROM}), got {list(probs.shape)}")
    return int(target_probs.shape[-1])


def check_uniforms(uniform_probs, lead: tuple[int, ...], lead_from: str) -> None:
    need_dtype("uniform_probs", uniform_probs, "float64")
    need_shape("uniform_probs", uniform_probs, lead, lead_from)


def check_inv_q(inv_q, batch, vocab, batch_from: str) -> None:
    need_dtype("inv_q", inv_q, "float32")
    need_shape("inv_q", inv_q, (batch, vocab), f"{batch_from}, {V_FROM}")


def check_recovered(cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
                    recovered_token_ids, max_spec_len=None, values=True) -> tuple[int, int]:
    """Returns (B, V)."""
    need_dtype("draft_token_ids", draft_token_ids, "int32")
    need_ndim("draft_token_ids", draft_token_ids, 1)
    need_dtype("cu_num_draft_tokens", cu_num_draft_tokens, "int32")
    need_ndim("cu_num_draft_tokens", cu_num_draft_tokens, 1)
    tokens, batch = len(draft_token_ids), len(cu_num_draft_tokens)
    vocab = check_tables(target_probs, draft_probs, (tokens,), T_FLAT)
    check_inv_q(inv_q, batch, vocab, B_FLAT)
    need_dtype("recovered_token_ids", recovered_token_ids, "int32")
    need_shape("recovered_token_ids", recovered_token_ids, (tokens,), T_FLAT)
    if values:
        need_inclusive_offsets("cu_num_draft_tokens", cu_num_draft_tokens, tokens, T_FLAT)
        need_at_least("draft_token_ids", draft_token_ids, PLACEHOLDER)
    largest = largest_count(cu_num_draft_tokens, inclusive=True) if values else None
    need_hint("max_spec_len", max_spec_len, largest, "the most drafts of a request")
    return batch, vocab


def first_max(scores) -> int:
    """The lowest index attaining the maximum of a float row; NaN never wins; 0 when every score is NaN."""
    numbers = scores[~np.isnan(scores)]
    return int(np.flatnonzero(scores == numbers.max())[0]) if len(numbers) else 0


def residual(target_row, draft_row, draft):
    """The recovery distribution (unnormalized) of one position: max(p - q, 0) with draft probs (NaN
    stays NaN), else p with the draft's own id zeroed (an out-of-vocabulary draft zeroes nothing)."""
    if draft_row is not None:
        diff = target_row - draft_row
        return np.where(diff < 0, np.float32(0), diff)
    prob = target_row.copy()
    if 0 <= draft < len(prob):
        prob[draft] = 0
    return prob


def recovered(*, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids,
              max_spec_len=None):
    """Recovered tokens: per draft token t of request r, the lowest index maximizing the f32 score
    `residual[v] * inv_q[r, v]` (see `residual`, `first_max`). Always in [0, V). `max_spec_len`, a
    host hint, is checked and not needed."""
    batch, _ = check_recovered(cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
                               recovered_token_ids, max_spec_len=max_spec_len)
    for r in range(batch):
        start, end = span(cu_num_draft_tokens, r)
        for t in range(start, end):
            recovered_token_ids[t] = recover(target_probs[t], None if draft_probs is None else draft_probs[t],
                                             int(draft_token_ids[t]), inv_q[r])


def recover(target_row, draft_row, draft, inv_q_row) -> int:
    """The recovered token of one position: first_max of the f32 scores residual * inv_q."""
    with np.errstate(all="ignore"):
        score = residual(target_row, draft_row, draft) * inv_q_row   # f32 * f32: one rounding
    return first_max(score)


def check_random(draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                 target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids,
                 values=True) -> tuple[int, int]:
    """Returns (B, V)."""
    if is_greedy is None:
        need_dtype("is_greedy", is_greedy, "bool")
    batch = check_batch(draft_token_ids, cu_num_draft_tokens, max_spec_len, output_token_ids, is_greedy,
                        bonus_token_ids, values)
    tokens = len(draft_token_ids)
    vocab = check_tables(target_probs, draft_probs, (tokens,), T_FLAT)
    need_dtype("recovered_token_ids", recovered_token_ids, "int32")
    need_shape("recovered_token_ids", recovered_token_ids, (tokens,), T_FLAT)
    check_uniforms(uniform_probs, (tokens,), T_FLAT)
    if values:
        need_at_least("recovered_token_ids", recovered_token_ids, 0)
        need_at_most("recovered_token_ids", recovered_token_ids, vocab - 1, "ids < V")
    return batch, vocab


def accepts(draft, target_row, draft_row, u) -> bool:
    """The acceptance test of one draft: q > 0 and f64(f32(p / q)) >= u; a placeholder or an
    out-of-vocabulary draft is rejected (its probabilities are never read)."""
    if draft < 0 or draft >= len(target_row):
        return False
    q = np.float32(1) if draft_row is None else draft_row[draft]
    if not q > 0:
        return False
    with np.errstate(all="ignore"):
        ratio = np.float32(target_row[draft]) / np.float32(q)   # IEEE f32 division, round to nearest
    return float(ratio) >= float(u)


def accepts_strict(draft, target_row, draft_row, u, q_range: bool = True) -> bool:
    """The acceptance test of dialect `strict` (SGLang, FlashInfer): `f32(f32(u) * q) < p`, i.e. the f64
    uniform rounded to f32 (to nearest), one f32 product rounded to nearest, compared with p in f32. Ties
    reject (also u = 0 with p = 0) and so does a NaN p or q. `q_range`: q must lie in (0, 1] (`strict`);
    without it (`strict_q0`) q = 0 accepts exactly when p > 0. Placeholder and out-of-vocabulary drafts
    are rejected unread, as in `accepts`."""
    if draft < 0 or draft >= len(target_row):
        return False
    q = np.float32(1) if draft_row is None else np.float32(draft_row[draft])
    if q_range and not (0 < q <= 1):
        return False
    with np.errstate(all="ignore"):
        product = np.float32(np.float32(u) * q)    # f32 * f32: one rounding
    return bool(product < np.float32(target_row[draft]))


def accepts_strict_q0(draft, target_row, draft_row, u) -> bool:
    """`accepts_strict` without the range test on q (FlashInfer's `chain_speculative_sampling`)."""
    return accepts_strict(draft, target_row, draft_row, u, q_range=False)


def random(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
           recovered_token_ids, uniform_probs, is_greedy, output_token_ids):
    """Random (rejection-sampling) verification of the rows that are not greedy: emit each accepted
    draft (see `accepts`), the recovered token in place of the first rejected one and stop there; a row
    that accepts every draft also emits its bonus. Greedy rows and unemitted slots are left untouched."""
    verify_random(accepts, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                  target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids)


def random_strict(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                  target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids):
    """`random` judged by dialect `strict`: each draft's acceptance test is `accepts_strict`."""
    verify_random(accepts_strict, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                  target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids)


def random_strict_q0(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                     target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids):
    """`random` judged by dialect `strict_q0`: each draft's acceptance test is `accepts_strict_q0`."""
    verify_random(accepts_strict_q0, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len,
                  draft_probs, target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids)


def verify_random(accept, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                  target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids) -> None:
    """`random` with the acceptance test `accept(draft, target_row, draft_row, u)`."""
    batch, _ = check_random(draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs,
                            target_probs, recovered_token_ids, uniform_probs, is_greedy, output_token_ids)
    for r in range(batch):
        if is_greedy[r]:
            continue
        start, end = span(cu_num_draft_tokens, r)
        drafts = draft_token_ids[start:end]
        emit_row(output_token_ids[r], drafts, recovered_token_ids[start:end],
                 lambda pos: accept(int(drafts[pos]), target_probs[start + pos],
                                    None if draft_probs is None else draft_probs[start + pos],
                                    uniform_probs[start + pos]),
                 bonus_token_ids[r])


def check_sample(draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
                 is_greedy, uniform_probs, inv_q, output_token_ids, values=True) -> tuple[int, int]:
    """Returns (B, V). The noise inputs are required exactly when some row may be random."""
    batch = check_batch(draft_token_ids, cu_num_draft_tokens, max_spec_len, output_token_ids, is_greedy,
                        bonus_token_ids, values)
    tokens = len(draft_token_ids)
    vocab = check_tables(target_probs, draft_probs, (tokens,), T_FLAT)
    if is_greedy is not None:
        check_uniforms(uniform_probs, (tokens,), T_FLAT)
        check_inv_q(inv_q, batch, vocab, B_FLAT)
    return batch, vocab


def sample(*, draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
           is_greedy, uniform_probs, inv_q, output_token_ids):
    """The whole verification step: the output is reset to -1, greedy rows (every row when `is_greedy` is
    None) run `greedy` against the lowest-index argmax of target_probs, the others `recovered` then
    `random`. With `is_greedy` None the noise inputs are not read."""
    check_sample(draft_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs, bonus_token_ids,
                 is_greedy, uniform_probs, inv_q, output_token_ids)
    output_token_ids[...] = PLACEHOLDER
    argmax = np.array([first_max(row) for row in target_probs], np.int64)
    greedy(draft_token_ids=draft_token_ids, target_argmax=argmax, bonus_token_ids=bonus_token_ids,
           cu_num_draft_tokens=cu_num_draft_tokens, is_greedy=is_greedy, max_spec_len=max_spec_len,
           output_token_ids=output_token_ids)
    if is_greedy is None:
        return
    recovered_ids = np.zeros(len(draft_token_ids), np.int32)
    recovered(cu_num_draft_tokens=cu_num_draft_tokens, draft_token_ids=draft_token_ids, draft_probs=draft_probs,
              target_probs=target_probs, inv_q=inv_q, recovered_token_ids=recovered_ids)
    random(draft_token_ids=draft_token_ids, bonus_token_ids=bonus_token_ids,
           cu_num_draft_tokens=cu_num_draft_tokens, max_spec_len=max_spec_len, draft_probs=draft_probs,
           target_probs=target_probs, recovered_token_ids=recovered_ids, uniform_probs=uniform_probs,
           is_greedy=is_greedy, output_token_ids=output_token_ids)


def check_padded(draft_token_ids, bonus_token_ids, is_greedy, output_token_ids, num_rejected_tokens,
                 last_token_ids, values=True) -> tuple[int, int]:
    """Checks shared by the padded-layout stages; returns (B, K)."""
    need_dtype("draft_token_ids", draft_token_ids, "int64")
    need_ndim("draft_token_ids", draft_token_ids, 2)
    batch, k = (int(n) for n in draft_token_ids.shape)
    need_dtype("bonus_token_ids", bonus_token_ids, "int64")
    need_shape("bonus_token_ids", bonus_token_ids, (batch,), BK_PADDED)
    if is_greedy is not None:
        need_dtype("is_greedy", is_greedy, "bool")
        need_shape("is_greedy", is_greedy, (batch,), BK_PADDED)
    for name, out, shape in (("output_token_ids", output_token_ids, (batch, k + 1)),
                             ("num_rejected_tokens", num_rejected_tokens, (batch,)),
                             ("last_token_ids", last_token_ids, (batch,))):
        need_dtype(name, out, "int64")
        need_shape(name, out, shape, BK_PADDED)
    if values:
        need_at_least("draft_token_ids", draft_token_ids, PLACEHOLDER)
        need_at_least("bonus_token_ids", bonus_token_ids, PLACEHOLDER)
    return batch, k


def finish_padded_row(b, emitted, output_token_ids, num_rejected_tokens, last_token_ids) -> None:
    """-1 after the emitted prefix of row b, and the row's counts."""
    output_token_ids[b, emitted:] = PLACEHOLDER
    num_rejected_tokens[b] = output_token_ids.shape[1] - emitted
    last_token_ids[b] = output_token_ids[b, emitted - 1]


def check_greedy_padded(draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                        num_rejected_tokens, last_token_ids, values=True) -> tuple[int, int]:
    batch, k = check_padded(draft_token_ids, bonus_token_ids, is_greedy, output_token_ids, num_rejected_tokens,
                            last_token_ids, values)
    need_dtype("target_argmax", target_argmax, "int64")
    need_shape("target_argmax", target_argmax, (batch, k), BK_PADDED)
    if values:
        need_at_least("target_argmax", target_argmax, 0)
    return batch, k


def greedy_padded(*, draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                  num_rejected_tokens, last_token_ids):
    """`greedy` on the padded layout (every request has K drafts); each greedy row (every row when
    `is_greedy` is None) is written in full: its emitted prefix, -1 to the end, the number of slots not
    emitted (K + 1 - emitted) and its last emitted token. Other rows are left untouched."""
    batch, _ = check_greedy_padded(draft_token_ids, target_argmax, bonus_token_ids, is_greedy, output_token_ids,
                                   num_rejected_tokens, last_token_ids)
    for b in range(batch):
        if is_greedy is not None and not is_greedy[b]:
            continue
        drafts, argmax = draft_token_ids[b], target_argmax[b]
        emitted = emit_row(output_token_ids[b], drafts, argmax, lambda pos: drafts[pos] == argmax[pos],
                           bonus_token_ids[b])
        finish_padded_row(b, emitted, output_token_ids, num_rejected_tokens, last_token_ids)


def check_sample_padded(draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy, uniform_probs,
                        inv_q, output_token_ids, num_rejected_tokens, last_token_ids, values=True):
    """Returns (B, K). The noise inputs are required exactly when `is_greedy` is given."""
    batch, k = check_padded(draft_token_ids, bonus_token_ids, is_greedy, output_token_ids, num_rejected_tokens,
                            last_token_ids, values)
    vocab = check_tables(target_probs, draft_probs, (batch, k), BK_PADDED)
    if is_greedy is not None:
        check_uniforms(uniform_probs, (batch, k), BK_PADDED)
        check_inv_q(inv_q, batch, vocab, BK_PADDED)
    return batch, k


def sample_padded(*, draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy, uniform_probs,
                  inv_q, output_token_ids, num_rejected_tokens, last_token_ids):
    """`sample` on the padded layout, every row written as in `greedy_padded`: greedy rows (every row
    when `is_greedy` is None; then the noise is not read) verify against the lowest-index argmax of
    target_probs, the others by `accepts` with `recover` as the replacement."""
    batch, k = check_sample_padded(draft_token_ids, draft_probs, target_probs, bonus_token_ids, is_greedy,
                                   uniform_probs, inv_q, output_token_ids, num_rejected_tokens, last_token_ids)
    for b in range(batch):
        drafts = draft_token_ids[b]
        dp = [None] * k if draft_probs is None else draft_probs[b]
        if is_greedy is None or is_greedy[b]:
            alternatives = [first_max(target_probs[b, pos]) for pos in range(k)]
            emitted = emit_row(output_token_ids[b], drafts, alternatives,
                               lambda pos: drafts[pos] == alternatives[pos], bonus_token_ids[b])
        else:
            alternatives = [recover(target_probs[b, pos], dp[pos], int(drafts[pos]), inv_q[b]) for pos in range(k)]
            emitted = emit_row(output_token_ids[b], drafts, alternatives,
                               lambda pos: accepts(int(drafts[pos]), target_probs[b, pos], dp[pos],
                                                   uniform_probs[b, pos]),
                               bonus_token_ids[b])
        finish_padded_row(b, emitted, output_token_ids, num_rejected_tokens, last_token_ids)


def expand(*, x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded):
    """Broadcast each request's value to its tokens: expanded[start(r):cu[r]] = x[r], or replace_to where
    x[r] == replace_from (compared after converting replace_from to x's dtype). No cap on tokens per request."""
    value_from, value_to = check_expand(x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded)
    for r in range(len(x)):
        start, end = span(cu_num_tokens, r)
        for t in range(start, end):
            expanded[t] = value_to if x[r] == value_from else x[r]


def check_expand(x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded, values=True):
    """Returns replace_from and replace_to as scalars of x's dtype (exactly representable when x is
    an integer array; rounded to nearest for float32)."""
    need_dtype("x", x, "float32", "int32", "int64")
    need_ndim("x", x, 1)
    need_dtype("cu_num_tokens", cu_num_tokens, "int32")
    need_shape("cu_num_tokens", cu_num_tokens, tuple(x.shape), "B = len(x)")
    need_int("num_tokens", num_tokens)
    need_dtype("expanded", expanded, dtype_name(x), source="dtype of x")
    need_shape("expanded", expanded, (num_tokens,), "T = num_tokens")
    if values:
        need_inclusive_offsets("cu_num_tokens", cu_num_tokens, num_tokens)
    kind = np.dtype(dtype_name(x))
    scalars = []
    for name, v in (("replace_from", replace_from), ("replace_to", replace_to)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{name}: must be a Python int or float, got {type(v).__name__}")
        if kind.kind == "i" and not (isinstance(v, int) and np.iinfo(kind).min <= v <= np.iinfo(kind).max):
            raise ValueError(f"{name}: must be an int that fits {kind}, got {v!r}")
        scalars.append(kind.type(v))
    return scalars


# ---------------------------------------------------------------- rejection.chain_cdf

BK_FROM = "B, K+1 = candidates.shape"


def check_chain_cdf(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
                    accept_token_num, values=True) -> tuple[int, int, int]:
    """Returns (B, K, V). `values=False` skips the checks that read array contents."""
    need_dtype("candidates", candidates, "int64")
    need_ndim("candidates", candidates, 2)
    batch, width = (int(n) for n in candidates.shape)
    if width < 1:
        raise ValueError(f"candidates: shape must be [B, K+1] with K >= 0 (column 0 is the previous token), "
                         f"got {list(candidates.shape)}")
    k = width - 1
    vocab = need_chain_tables(target_probs, draft_probs, batch, k, BK_FROM)
    need_dtype("uniform_samples", uniform_samples, "float32")
    need_shape("uniform_samples", uniform_samples, (batch, k + 1), BK_FROM)
    need_dtype("uniform_final", uniform_final, "float32")
    need_shape("uniform_final", uniform_final, (batch,), BK_FROM)
    for name, out, shape in (("predicts", predicts, (batch * (k + 1),)), ("accept_index", accept_index, (batch, k + 1)),
                             ("accept_token_num", accept_token_num, (batch,))):
        need_dtype(name, out, "int32")
        need_shape(name, out, shape, BK_FROM)
    if batch * (k + 1) - 1 > INT32_MAX:
        raise ValueError(f"accept_index: slots up to B*(K+1) - 1 = {batch * (k + 1) - 1} do not fit int32")
    if vocab - 1 > INT32_MAX:
        raise ValueError(f"target_probs: V = {vocab} ids do not fit the int32 predicts")
    if values:
        need_at_least("candidates", candidates, PLACEHOLDER)
    return batch, k, vocab


def cdf_accepts(draft: int, p_row, q_row, u, q_range: bool = True) -> bool:
    """Whether draft `draft` passes: an id in [0, V) and, with p = p_row[draft], q = q_row[draft],
    f32(u * q) < p (ties and NaN reject); with `q_range`, q must also lie in (0, 1]."""
    if not 0 <= draft < len(p_row):
        return False
    p, q = np.float32(p_row[draft]), np.float32(q_row[draft])
    if q_range and not (0 < q <= 1):
        return False
    with np.errstate(all="ignore"):
        product = np.float32(np.float32(u) * q)
    return bool(product < p)


def cdf_residual(p_row, q_row, q_range: bool = True) -> np.ndarray:
    """f32 residual after a rejection, cell by cell: max(p[v] - q'[v], 0) with a NaN difference taken as
    0. q' is q where 0 <= q <= 1, else 0 (`q_range`), or q with only a NaN zeroed (not `q_range`).
    `q_row` None (every draft accepted): p as it stands."""
    p = np.array(p_row, np.float32)
    if q_row is None:
        return p
    q = np.array(q_row, np.float32)
    with np.errstate(all="ignore"):
        kept = ((q >= 0) & (q <= 1)) if q_range else ~np.isnan(q)
        diff = p - np.where(kept, q, np.float32(0))                       # one f32 subtraction per cell
        return np.where(diff > 0, diff, np.float32(0)).astype(np.float32)  # NaN and negatives become 0


def running_sums(res) -> np.ndarray:
    """The f32 running sum of `res`, left to right (NumPy's accumulate adds in order)."""
    with np.errstate(all="ignore"):
        return np.add.accumulate(np.asarray(res, np.float32), dtype=np.float32)


def pick(res, u_final) -> int:
    """The inverse-CDF pick: t = f32(u_final * total), the lowest v whose running sum exceeds t; V - 1
    when none does (total 0 or NaN, t at or past the sum)."""
    sums = running_sums(res)
    with np.errstate(all="ignore"):
        t = np.float32(np.float32(u_final) * sums[-1])
    above = np.flatnonzero(sums > t)
    return int(above[0]) if len(above) else len(res) - 1


def verify_row(drafts, p_rows, q_rows, uniforms, u_final, q_range: bool = True) -> tuple[int, int]:
    """(accepted drafts, picked token) of one request: drafts d_0..d_{K-1} with target rows p_0..p_K
    and draft rows q_0..q_{K-1}."""
    k = len(drafts)
    num = 0
    while num < k and cdf_accepts(int(drafts[num]), p_rows[num], q_rows[num], uniforms[num], q_range):
        num += 1
    res = cdf_residual(p_rows[num], q_rows[num] if num < k else None, q_range)
    return num, pick(res, u_final)


def chain_cdf(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
              accept_token_num):
    """Verify each request's drafts `candidates[b, 1:]` in order by `accepts`, stop at the first
    rejection, then emit the `pick` of the residual of that position (of p_K when all K are accepted).
    Writes predicts[b*(K+1) + 0..num], accept_index[b, 0..num] (those flat slots) and
    accept_token_num[b] = num; nothing else."""
    run(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
        accept_token_num, q_range=True)


def chain_cdf_snapshot(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts,
                       accept_index, accept_token_num):
    """`chain_cdf` under dialect `snapshot`: no range test on q (q = 0 accepts iff p > 0) and only a NaN
    q is zeroed in the residual."""
    run(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
        accept_token_num, q_range=False)


def run(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
        accept_token_num, q_range: bool) -> None:
    batch, k, _ = check_chain_cdf(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts,
                                  accept_index, accept_token_num)
    for b in range(batch):
        drafts = candidates[b, 1:]
        num, token = verify_row(drafts, target_probs[b], draft_probs[b], uniform_samples[b], uniform_final[b],
                                q_range)
        base = b * (k + 1)
        for pos in range(num):
            predicts[base + pos] = drafts[pos]
            accept_index[b, pos] = base + pos
        predicts[base + num] = token
        accept_index[b, num] = base + num
        accept_token_num[b] = num
