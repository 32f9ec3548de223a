"""Oracles of the `rejection` family: verification of draft tokens against the target model.

Loop-level and obviously correct; every function follows destination passing (outputs are keyword
arguments written in place) and refuses invalid input with an error naming the field.
"""
from __future__ import annotations

from specverify.oracles.checks import (need_at_least, need_at_most, need_dtype, need_inclusive_offsets,
                                       need_int, need_ndim, need_shape)

PLACEHOLDER = -1


INT32_MAX = 2**31 - 1


def check_batch(draft_token_ids, cu_num_draft_tokens, max_spec_len, output_token_ids, is_greedy=None,
                bonus_token_ids=None, values=True) -> int:
    """Checks shared by the flattened-layout stages; returns B. `values=False` skips the checks that
    read array contents (the production kernels skip them on CUDA outside checked mode)."""
    need_dtype("draft_token_ids", draft_token_ids, "int32")
    need_ndim("draft_token_ids", draft_token_ids, 1)
    need_dtype("cu_num_draft_tokens", cu_num_draft_tokens, "int32")
    need_ndim("cu_num_draft_tokens", cu_num_draft_tokens, 1)
    need_int("max_spec_len", max_spec_len)
    batch = len(cu_num_draft_tokens)
    need_dtype("output_token_ids", output_token_ids, "int32")
    need_shape("output_token_ids", output_token_ids, (batch, max_spec_len + 1))
    if is_greedy is not None:
        need_dtype("is_greedy", is_greedy, "bool")
        need_shape("is_greedy", is_greedy, (batch,))
    if bonus_token_ids is not None:
        need_dtype("bonus_token_ids", bonus_token_ids, "int64")
        need_shape("bonus_token_ids", bonus_token_ids, (batch,))
    if values:
        need_inclusive_offsets("cu_num_draft_tokens", cu_num_draft_tokens, len(draft_token_ids))
        counts = cu_num_draft_tokens[1:] - cu_num_draft_tokens[:-1]
        need_at_most("cu_num_draft_tokens", cu_num_draft_tokens[:1], max_spec_len,
                     "draft tokens per request <= max_spec_len")
        need_at_most("cu_num_draft_tokens", counts, max_spec_len, "draft tokens per request <= max_spec_len")
        need_at_least("draft_token_ids", draft_token_ids, PLACEHOLDER)
        if bonus_token_ids is not None:
            need_at_least("bonus_token_ids", bonus_token_ids, PLACEHOLDER)
            need_at_most("bonus_token_ids", bonus_token_ids, INT32_MAX, "ids fit the int32 output")
    return batch


def check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                 max_spec_len, output_token_ids, values=True) -> int:
    batch = check_batch(draft_token_ids, cu_num_draft_tokens, max_spec_len, output_token_ids, is_greedy,
                        bonus_token_ids, values)
    need_dtype("target_argmax", target_argmax, "int64")
    need_shape("target_argmax", target_argmax, tuple(draft_token_ids.shape))
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
        start = 0 if r == 0 else int(cu_num_draft_tokens[r - 1])
        count = int(cu_num_draft_tokens[r]) - start
        all_accepted = True
        for pos in range(count):
            t = start + pos
            output_token_ids[r, pos] = target_argmax[t]
            if draft_token_ids[t] != target_argmax[t]:
                all_accepted = False
                break
        if all_accepted:
            output_token_ids[r, count] = bonus_token_ids[r]
