"""Triton kernel of stage `ngram.propose`: one launch, one program per request (grid (B,)), no host sync
outside checked mode. A program measures, BLOCK end positions at a time, how many tokens up to each agree
with the end of its own history, keeps the best match by the rule's key across blocks (and across every
request's history when pooled), then writes its drafts and the fill in one masked store of BLOCK_K slots."""
from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.oracles import ngram as oracle

BLOCK = 256    # most end positions a program measures at once


@triton.jit
def suffix_lengths(row, col_stride, ends, valid, pattern_row, pattern_end, longest):
    """For each end position of `ends` (lanes `valid`): how many consecutive tokens up to it in `row` equal
    those up to `pattern_end` in `pattern_row`, at most `longest`."""
    alive = valid
    length = tl.zeros_like(ends)
    for i in range(0, longest):
        alive = alive & (ends >= i)
        tok = tl.load(row + (ends - i).to(tl.int64) * col_stride, mask=alive)
        want = tl.load(pattern_row + (pattern_end - i).to(tl.int64) * col_stride)
        alive = alive & (tok == want)
        length += alive.to(tl.int32)
    return length


@launcher
@triton.jit
def ngram_kernel(tok_ptr, tok_rows, tok_cols, len_ptr, len_stride, draft_ptr, draft_rows, draft_cols, count_ptr,
                 count_stride, batch, k, min_n, max_n, max_model_len, NEWER: tl.constexpr, FILL: tl.constexpr,
                 CAPPED: tl.constexpr, POOLED: tl.constexpr, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    """Request b's match: the largest key (length, own history, start order, -request) over the end
    positions e with a follower of each searched history; start order is the start e - length + 1 when
    NEWER, else its negation. Then its drafts, and the FILL past them ("none": left unwritten)."""
    b = tl.program_id(0)
    own_row = tok_ptr + b.to(tl.int64) * tok_rows
    length = tl.load(len_ptr + b.to(tl.int64) * len_stride).to(tl.int32)
    longest = tl.minimum(max_n, length - 1)
    lanes = tl.arange(0, BLOCK)
    best_len, best_own, best_order = 0, 0, 0        # best_len 0: no match yet
    best_request = b
    if POOLED:
        first, last = 0, batch
    else:
        first, last = b, b + 1
    for j in range(first, last):
        row = tok_ptr + tl.cast(j, tl.int64) * tok_rows
        searched = tl.load(len_ptr + tl.cast(j, tl.int64) * len_stride).to(tl.int32)
        own = (j == b).to(tl.int32)
        for block_start in range(0, searched - 1, BLOCK):
            ends = block_start + lanes
            matched = suffix_lengths(row, tok_cols, ends, ends <= searched - 2, own_row, length - 1, longest)
            matched = tl.where(matched >= min_n, matched, 0)
            top = tl.max(matched, axis=0)
            starts = ends - matched + 1
            if NEWER:
                order = tl.max(tl.where(matched == top, starts, -1), axis=0)
            else:
                order = -tl.min(tl.where(matched == top, starts, searched), axis=0)
            after_length = (own > best_own) | ((own == best_own) & (order > best_order))
            better = (top > 0) & ((top > best_len) | ((top == best_len) & after_length))
            best_len = tl.where(better, top, best_len)
            best_own = tl.where(better, own, best_own)
            best_order = tl.where(better, order, best_order)
            best_request = tl.where(better, j, best_request)
    if NEWER:
        best_end = best_order + best_len - 1
    else:
        best_end = best_len - 1 - best_order
    budget = k
    if CAPPED:
        budget = tl.minimum(k, max_model_len - length)
    source_len = tl.load(len_ptr + best_request.to(tl.int64) * len_stride).to(tl.int32)
    count = tl.where(best_len > 0, tl.maximum(tl.minimum(budget, source_len - 1 - best_end), 0), 0)
    slots = tl.arange(0, BLOCK_K)
    drafted = slots < count
    source_row = tok_ptr + best_request.to(tl.int64) * tok_rows
    drafts = tl.load(source_row + (best_end + 1 + slots).to(tl.int64) * tok_cols, mask=drafted)
    if FILL == "last":
        fill = tl.load(own_row + (length - 1).to(tl.int64) * tok_cols, mask=length > 0, other=-1)
    elif FILL == "-1":
        fill = -1
    else:                                    # "0"; under "none" no slot past the drafts is written
        fill = 0
    if FILL == "none":
        written = drafted
    else:
        written = slots < k
    tl.store(draft_ptr + b.to(tl.int64) * draft_rows + slots.to(tl.int64) * draft_cols,
             tl.where(drafted, drafts, fill).to(draft_ptr.dtype.element_ty), mask=written)
    tl.store(count_ptr + b.to(tl.int64) * count_stride, count)


def launch_rule(rule: oracle.Rule, *, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                num_draft_tokens) -> None:
    """Checks the arguments and launches `ngram_kernel` for `rule`. The integers passed are clamped where
    that changes nothing (a match is at most T - 1 long, a capped budget past K is K) so they fit int32."""
    batch, width, k = validate(oracle.check_propose, token_ids, num_tokens, min_n, max_n, max_model_len,
                               draft_token_ids, num_draft_tokens, values=reads_values(token_ids))
    if batch == 0:
        return
    ngram_kernel[(batch,)](
        token_ids, token_ids.stride(0), token_ids.stride(1), num_tokens, num_tokens.stride(0), draft_token_ids,
        draft_token_ids.stride(0), draft_token_ids.stride(1), num_draft_tokens, num_draft_tokens.stride(0), batch,
        k, min(min_n, width + 1), min(max_n, width), min(max_model_len, width + k),
        NEWER=rule.occurrence in ("rightmost", "newest"), FILL=rule.fill, CAPPED=rule.capped, POOLED=rule.pooled,
        BLOCK=min(BLOCK, next_power_of_2(max(width - 1, 1))), BLOCK_K=next_power_of_2(k))


@prepared
def propose(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids, num_draft_tokens):
    """See `specverify.oracles.ngram.propose`. Any strides."""
    launch_rule(oracle.RULES[""], **locals())


@prepared
def propose_short(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids, num_draft_tokens):
    """See `specverify.oracles.ngram.propose_short`. Any strides."""
    launch_rule(oracle.RULES["short"], **locals())


@prepared
def propose_uncapped(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids, num_draft_tokens):
    """See `specverify.oracles.ngram.propose_uncapped`. Any strides."""
    launch_rule(oracle.RULES["uncapped"], **locals())


@prepared
def propose_rightmost_last(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                           num_draft_tokens):
    """See `specverify.oracles.ngram.propose_rightmost_last`. Any strides."""
    launch_rule(oracle.RULES["rightmost_last"], **locals())


@prepared
def propose_trtllm_newest(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                          num_draft_tokens):
    """See `specverify.oracles.ngram.propose_trtllm_newest`. Any strides."""
    launch_rule(oracle.RULES["trtllm_newest"], **locals())


@prepared
def propose_trtllm_oldest(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                          num_draft_tokens):
    """See `specverify.oracles.ngram.propose_trtllm_oldest`. Any strides."""
    launch_rule(oracle.RULES["trtllm_oldest"], **locals())
