"""Oracles of the `eagle` family: the inputs of the next drafting pass.

Loop-level and obviously correct; destination passing (outputs are keyword arguments written in place);
invalid input is refused with an error naming the field. The `check_*` functions are shared with the
production kernels (`values=False` skips the checks that read array contents).

Dtypes where STAGES.md leaves them open: index inputs (offsets, lengths, positions, block tables) may be
int32 or int64; an output derived from an index input keeps that input's dtype (int32 in with int32 out,
as vLLM allocates them). Fixed choices: `num_rejected_tokens` int32, `slot_mapping` int64,
`out_new_token_indices` and `out_hidden_state_mapping` int32, the token masks bool.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np

from specverify.oracles import rejection
from specverify.oracles.arguments import (dtype_name, largest_count, need_at_least, need_at_most, need_dtype, need_hint,
                                       need_inclusive_offsets, need_int, need_ndim, need_shape)

PLACEHOLDER = -1
INDEX = ("int32", "int64")
B_QSL = "B = len(query_start_loc) - 1"


def dtype_max(a) -> int:
    return int(np.iinfo(dtype_name(a)).max)


def need_vector(name: str, a, length: int, *dtypes: str, source: str = "") -> None:
    """A 1-D array of `length` elements; `source` says where that length comes from."""
    need_dtype(name, a, *dtypes)
    need_shape(name, a, (length,), source)


def need_same_dtype(name: str, a, like, like_name: str) -> None:
    """`a` is an index array of `like`'s dtype."""
    need_dtype(name, a, *INDEX)
    need_dtype(name, a, dtype_name(like), source=f"dtype of {like_name}")


def need_fits(name: str, value: int, like, like_name: str) -> None:
    """`value` (derived from `name`) must fit the dtype of `like_name`."""
    if value > dtype_max(like):
        raise ValueError(f"{name}: the result {value} does not fit {like_name}'s {dtype_name(like)}")


def batch_of(query_start_loc) -> int:
    """B, from exclusive offsets of B + 1 entries."""
    need_dtype("query_start_loc", query_start_loc, *INDEX)
    need_ndim("query_start_loc", query_start_loc, 1)
    if len(query_start_loc) == 0:
        raise ValueError("query_start_loc: must hold B + 1 >= 1 offsets, got none")
    return len(query_start_loc) - 1


def need_exclusive_offsets(name: str, qsl, last_at_most: int | None = None) -> None:
    """Exclusive offsets: a leading 0, non-decreasing, the last at most `last_at_most`."""
    if int(qsl[0]) != 0:
        raise ValueError(f"{name}: must start at 0 (exclusive offsets), got {int(qsl[0])}")
    if len(qsl) > 1 and bool((qsl[1:] < qsl[:-1]).any()):
        raise ValueError(f"{name}: must be non-decreasing (exclusive offsets)")
    if last_at_most is not None and int(qsl[-1]) > last_at_most:
        raise ValueError(f"{name}: last offset {int(qsl[-1])} exceeds the {last_at_most} tokens")


# ---------------------------------------------------------------- eagle.next_token_padded

def check_next_token_padded(sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                            next_token_ids, valid_sampled_tokens_count, values=True) -> int:
    need_dtype("sampled_token_ids", sampled_token_ids, "int32")
    need_ndim("sampled_token_ids", sampled_token_ids, 2)
    batch, b = sampled_token_ids.shape[0], "B = sampled_token_ids.shape[0]"
    need_vector("discard_mask", discard_mask, batch, "bool", source=b)
    need_vector("backup_next_token_ids", backup_next_token_ids, batch, "int32", source=b)
    need_int("vocab_size", vocab_size, 1)
    need_vector("next_token_ids", next_token_ids, batch, "int32", source=b)
    need_vector("valid_sampled_tokens_count", valid_sampled_tokens_count, batch, "int32", source=b)
    if values:
        need_at_least("sampled_token_ids", sampled_token_ids, PLACEHOLDER)
    return batch


def next_token_padded(*, sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                      next_token_ids, valid_sampled_tokens_count):
    """Per row: the number of valid sampled ids (not -1, below V) and the last valid one (anywhere in
    the row, gaps allowed); a discarded row or one without a valid id takes its backup id. Every row written."""
    batch = check_next_token_padded(sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                                    next_token_ids, valid_sampled_tokens_count)
    for r in range(batch):
        count, last = 0, None
        if not discard_mask[r]:
            for tok in sampled_token_ids[r]:
                if tok != PLACEHOLDER and tok < vocab_size:
                    count, last = count + 1, tok
        next_token_ids[r] = backup_next_token_ids[r] if last is None else last
        valid_sampled_tokens_count[r] = count


# ---------------------------------------------------------------- eagle.prepare_inputs_padded

def check_prepare_inputs_padded(cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc, num_reqs,
                                token_indices_to_sample, num_rejected_tokens, values=True) -> int:
    need_dtype("cu_num_draft_tokens", cu_num_draft_tokens, "int32")
    need_ndim("cu_num_draft_tokens", cu_num_draft_tokens, 1)
    batch, b = len(cu_num_draft_tokens), "B = len(cu_num_draft_tokens)"
    need_vector("valid_sampled_tokens_count", valid_sampled_tokens_count, batch, "int32", source=b)
    need_vector("query_start_loc", query_start_loc, batch + 1, *INDEX, source=b)
    need_int("num_reqs", num_reqs)
    if num_reqs > batch:
        raise ValueError(f"num_reqs: must be <= B = {batch}, got {num_reqs}")
    need_same_dtype("token_indices_to_sample", token_indices_to_sample, query_start_loc, "query_start_loc")
    need_vector("token_indices_to_sample", token_indices_to_sample, batch, *INDEX, source=b)
    need_vector("num_rejected_tokens", num_rejected_tokens, batch, "int32", source=b)
    if values and num_reqs:  # only the rows the stage reads: the rest may hold stale values
        cu = cu_num_draft_tokens[:num_reqs]
        need_inclusive_offsets("cu_num_draft_tokens", cu, int(cu[-1]))
        count = valid_sampled_tokens_count[:num_reqs]
        need_at_least("valid_sampled_tokens_count", count, 0)
        if bool((count[:1] > cu[:1] + 1).any()) or bool((count[1:] > cu[1:] - cu[:-1] + 1).any()):
            raise ValueError("valid_sampled_tokens_count: must be <= draft tokens + 1 per request")
        need_exclusive_offsets("query_start_loc", query_start_loc[:num_reqs + 1])
    return batch


def prepare_inputs_padded(*, cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc, num_reqs,
                          token_indices_to_sample, num_rejected_tokens):
    """For each of the first num_reqs requests: its rejected tokens (n + 1 - valid count, 0 without
    drafts) and the index of its last accepted token in the padded query; later rows untouched."""
    check_prepare_inputs_padded(cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc, num_reqs,
                                token_indices_to_sample, num_rejected_tokens)
    for r in range(num_reqs):
        n = int(cu_num_draft_tokens[r]) - (0 if r == 0 else int(cu_num_draft_tokens[r - 1]))
        rejected = n + 1 - int(valid_sampled_tokens_count[r]) if n > 0 else 0
        num_rejected_tokens[r] = rejected
        token_indices_to_sample[r] = int(query_start_loc[r + 1]) - 1 - rejected


# ---------------------------------------------------------------- eagle.verify_and_prepare_padded

@contextmanager
def output_as_sampled() -> Iterator[None]:
    """next_token_padded reads the verified output_token_ids as its sampled_token_ids: an error it
    raises about that field names the fused stage's field as well."""
    try:
        yield
    except (ValueError, TypeError) as error:
        if not str(error).startswith("sampled_token_ids"):
            raise
        raise type(error)(f"output_token_ids: after verification, as next_token_padded's {error}") from error


def check_verify_and_prepare(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                             max_spec_len, output_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                             query_start_loc, num_reqs, next_token_ids, valid_sampled_tokens_count,
                             token_indices_to_sample, num_rejected_tokens, values=True) -> int:
    """The three pieces' checks as a fused kernel runs them before its launch: every dtype and shape,
    and (`values`) the values verification reads. The values the later pieces read depend on what
    verification writes: `check_verified` checks them afterwards. Returns B."""
    batch = rejection.check_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                                   max_spec_len, output_token_ids, values)
    check_next_token_padded(output_token_ids, discard_mask, backup_next_token_ids, vocab_size, next_token_ids,
                            valid_sampled_tokens_count, values=False)
    check_prepare_inputs_padded(cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc, num_reqs,
                                token_indices_to_sample, num_rejected_tokens, values=False)
    return batch


def check_verified(cu_num_draft_tokens, output_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                   query_start_loc, num_reqs, next_token_ids, valid_sampled_tokens_count, token_indices_to_sample,
                   num_rejected_tokens) -> None:
    """The value checks of next_token_padded and prepare_inputs_padded on what the fused step wrote, in
    the order the three pieces run them: the same first error as the composition."""
    with output_as_sampled():
        check_next_token_padded(output_token_ids, discard_mask, backup_next_token_ids, vocab_size, next_token_ids,
                                valid_sampled_tokens_count)
    check_prepare_inputs_padded(cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc, num_reqs,
                                token_indices_to_sample, num_rejected_tokens)


def in_turn(greedy, next_token, prepare, fields: dict) -> None:
    """verify_and_prepare_padded as its three pieces in turn, each a backend's own (the oracle's here, the
    Torch kernels in `specverify.kernels.torch.eagle`), on `fields`: the stage's arguments by name."""
    greedy(**{name: fields[name] for name in GREEDY_FIELDS})
    with output_as_sampled():
        next_token(sampled_token_ids=fields["output_token_ids"],
                   **{name: fields[name] for name in NEXT_TOKEN_FIELDS})
    prepare(**{name: fields[name] for name in PREPARE_FIELDS})


GREEDY_FIELDS = ("draft_token_ids", "target_argmax", "bonus_token_ids", "cu_num_draft_tokens", "is_greedy",
                 "max_spec_len", "output_token_ids")
NEXT_TOKEN_FIELDS = ("discard_mask", "backup_next_token_ids", "vocab_size", "next_token_ids",
                     "valid_sampled_tokens_count")
PREPARE_FIELDS = ("cu_num_draft_tokens", "valid_sampled_tokens_count", "query_start_loc", "num_reqs",
                  "token_indices_to_sample", "num_rejected_tokens")


def verify_and_prepare_padded(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                              max_spec_len, output_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                              query_start_loc, num_reqs, next_token_ids, valid_sampled_tokens_count,
                              token_indices_to_sample, num_rejected_tokens):
    """The engine's padded EAGLE step after the target pass: rejection.greedy into output_token_ids,
    then next_token_padded on that buffer, then prepare_inputs_padded on its counts (`in_turn`)."""
    in_turn(rejection.greedy, next_token_padded, prepare_inputs_padded, locals())


# ---------------------------------------------------------------- eagle.prepare_inputs

def check_prepare_inputs(query_start_loc, seq_lens, num_draft_tokens, num_sampled, new_query_start_loc,
                         token_indices, new_seq_lens, values=True) -> int:
    batch = batch_of(query_start_loc)
    need_vector("seq_lens", seq_lens, batch, *INDEX, source=B_QSL)
    need_vector("num_draft_tokens", num_draft_tokens, batch, *INDEX, source=B_QSL)
    need_vector("num_sampled", num_sampled, batch, *INDEX, source=B_QSL)
    need_same_dtype("new_query_start_loc", new_query_start_loc, query_start_loc, "query_start_loc")
    need_vector("new_query_start_loc", new_query_start_loc, batch + 1, *INDEX, source=B_QSL)
    need_same_dtype("token_indices", token_indices, query_start_loc, "query_start_loc")
    need_ndim("token_indices", token_indices, 1)
    need_same_dtype("new_seq_lens", new_seq_lens, seq_lens, "seq_lens")
    need_vector("new_seq_lens", new_seq_lens, batch, *INDEX, source=B_QSL)
    if values:
        need_exclusive_offsets("query_start_loc", query_start_loc)
        need_at_least("num_draft_tokens", num_draft_tokens, 0)
        need_at_least("num_sampled", num_sampled, 0)
        if bool((num_sampled > num_draft_tokens + 1).any()):
            raise ValueError("num_sampled: must be <= num_draft_tokens + 1 per request")
        rejected = rejected_tokens(num_draft_tokens, num_sampled)
        if bool((query_start_loc[1:] - query_start_loc[:-1] < rejected).any()):
            raise ValueError("query_start_loc: a query length is shorter than the request's rejected tokens")
        if bool((seq_lens < rejected).any()):
            raise ValueError("seq_lens: a sequence is shorter than the request's rejected tokens")
        kept = int((query_start_loc[1:] - query_start_loc[:-1] - rejected).sum()) if batch else 0
        need_shape("token_indices", token_indices, (kept,), "the kept tokens, sum(q - rejected)")
    return batch


def rejected_tokens(num_draft_tokens, num_sampled):
    """n + 1 - num_sampled where n > 0, else 0 (NumPy or torch, elementwise)."""
    return (num_draft_tokens + 1 - num_sampled) * (num_draft_tokens > 0)


def prepare_inputs(*, query_start_loc, seq_lens, num_draft_tokens, num_sampled, new_query_start_loc,
                   token_indices, new_seq_lens):
    """Drop each request's rejected tokens from its query: new offsets, the indices of the kept tokens
    (each query's first q - rejected tokens), and sequence lengths shortened by the rejected count."""
    batch = check_prepare_inputs(query_start_loc, seq_lens, num_draft_tokens, num_sampled,
                                 new_query_start_loc, token_indices, new_seq_lens)
    new_query_start_loc[0] = 0
    out = 0
    for r in range(batch):
        n = int(num_draft_tokens[r])
        rejected = n + 1 - int(num_sampled[r]) if n > 0 else 0
        start = int(query_start_loc[r])
        for k in range(int(query_start_loc[r + 1]) - start - rejected):
            token_indices[out] = start + k
            out += 1
        new_query_start_loc[r + 1] = out
        new_seq_lens[r] = int(seq_lens[r]) - rejected


# ---------------------------------------------------------------- eagle.copy_and_expand_inputs

def check_copy_and_expand(target_token_ids, target_positions, next_token_ids, query_start_loc, query_end_loc,
                          padding_token_id, parallel_drafting_token_id, P, shift_input_ids, out_input_ids,
                          out_positions, out_is_rejected_token_mask, out_is_masked_token_mask,
                          out_new_token_indices, out_hidden_state_mapping, max_query_len=None,
                          values=True) -> tuple[int, int]:
    need_dtype("target_token_ids", target_token_ids, *INDEX)
    need_ndim("target_token_ids", target_token_ids, 1)
    tokens, n = len(target_token_ids), "N = len(target_token_ids)"
    need_vector("target_positions", target_positions, tokens, *INDEX, source=n)
    batch = batch_of(query_start_loc)
    need_same_dtype("next_token_ids", next_token_ids, target_token_ids, "target_token_ids")
    need_vector("next_token_ids", next_token_ids, batch, *INDEX, source=B_QSL)
    need_same_dtype("query_end_loc", query_end_loc, query_start_loc, "query_start_loc")
    need_vector("query_end_loc", query_end_loc, batch, *INDEX, source=B_QSL)
    for name, value in (("padding_token_id", padding_token_id),
                        ("parallel_drafting_token_id", parallel_drafting_token_id)):
        need_int(name, value, -dtype_max(target_token_ids) - 1)
        need_fits(name, value, target_token_ids, "target_token_ids")
    need_int("P", P, 1)
    if not isinstance(shift_input_ids, bool):
        raise TypeError(f"shift_input_ids: must be a Python bool, got {type(shift_input_ids).__name__}")
    size = tokens + batch * P - (batch if shift_input_ids else 0)
    sizes = f"N + B*P - (B if shift_input_ids), {n}, {B_QSL}"
    need_same_dtype("out_input_ids", out_input_ids, target_token_ids, "target_token_ids")
    need_vector("out_input_ids", out_input_ids, size, *INDEX, source=sizes)
    need_same_dtype("out_positions", out_positions, target_positions, "target_positions")
    need_vector("out_positions", out_positions, size, *INDEX, source=sizes)
    need_vector("out_is_rejected_token_mask", out_is_rejected_token_mask, size, "bool", source=sizes)
    need_vector("out_is_masked_token_mask", out_is_masked_token_mask, size, "bool", source=sizes)
    need_vector("out_new_token_indices", out_new_token_indices, batch * P, "int32", source=f"B*P, {B_QSL}")
    need_vector("out_hidden_state_mapping", out_hidden_state_mapping, tokens, "int32", source=n)
    if values:
        need_exclusive_offsets("query_start_loc", query_start_loc, tokens)
        if bool((query_end_loc < query_start_loc[:-1]).any()) or bool((query_end_loc >= query_start_loc[1:]).any()):
            raise ValueError("query_end_loc: each must lie in its request's query [qs, qn)")
        need_at_least("target_positions", target_positions, 0)
        if tokens:
            need_at_most("target_positions", target_positions, dtype_max(target_positions) - tokens - P,
                         "positions plus the query length fit the dtype")
    longest = largest_count(query_start_loc, inclusive=False) if values else None
    need_hint("max_query_len", max_query_len, longest, "the longest query")
    return batch, tokens


def copy_and_expand_inputs(*, target_token_ids, target_positions, next_token_ids, query_start_loc,
                           query_end_loc, padding_token_id, parallel_drafting_token_id, P, shift_input_ids,
                           out_input_ids, out_positions, out_is_rejected_token_mask, out_is_masked_token_mask,
                           out_new_token_indices, out_hidden_state_mapping, max_query_len=None):
    """Lay out each request's drafting input: its kept target ids (shifted by one when shifting), the
    next token, P-1 masked parallel-drafting slots, then one padding slot per rejected token. Only the
    requests' output spans are written (a longer buffer keeps its tail); the hidden-state mapping only
    when shifting. `max_query_len`, a host hint, is checked and not needed."""
    batch, _ = check_copy_and_expand(target_token_ids, target_positions, next_token_ids, query_start_loc,
                                     query_end_loc, padding_token_id, parallel_drafting_token_id, P,
                                     shift_input_ids, out_input_ids, out_positions, out_is_rejected_token_mask,
                                     out_is_masked_token_mask, out_new_token_indices, out_hidden_state_mapping,
                                     max_query_len)
    for r in range(batch):
        qs, qn, qe = int(query_start_loc[r]), int(query_start_loc[r + 1]), int(query_end_loc[r])
        rejected = qn - qe - 1
        if shift_input_ids:
            kept, offset, out0 = qe - qs, 1, qs + r * (P - 1)
        else:
            kept, offset, out0 = qe - qs + 1, 0, qs + r * P
        for j in range(kept + P + rejected):
            at = out0 + j
            if j < kept:
                token = target_token_ids[qs + offset + j]
            elif j == kept:
                token = next_token_ids[r]
            elif j < kept + P:
                token = parallel_drafting_token_id
            else:
                token = padding_token_id
            is_rejected = j >= kept + P
            out_input_ids[at] = token
            out_positions[at] = 0 if is_rejected else int(target_positions[qs]) + j
            out_is_rejected_token_mask[at] = is_rejected
            out_is_masked_token_mask[at] = kept < j < kept + P
            if kept <= j < kept + P:
                out_new_token_indices[r * P + j - kept] = at
        if shift_input_ids:
            for j in range(qn - qs):
                out_hidden_state_mapping[qs + j] = out0 + j


# ---------------------------------------------------------------- eagle.extend_queries

def check_extend_queries(query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens, values=True) -> int:
    batch = batch_of(query_start_loc)
    need_vector("seq_lens", seq_lens, batch, *INDEX, source=B_QSL)
    need_int("N", N)
    need_same_dtype("new_query_start_loc", new_query_start_loc, query_start_loc, "query_start_loc")
    need_vector("new_query_start_loc", new_query_start_loc, batch + 1, *INDEX, source=B_QSL)
    need_same_dtype("new_seq_lens", new_seq_lens, seq_lens, "seq_lens")
    need_vector("new_seq_lens", new_seq_lens, batch, *INDEX, source=B_QSL)
    if values:
        need_exclusive_offsets("query_start_loc", query_start_loc)
        need_at_least("seq_lens", seq_lens, 0)
        need_fits("N", int(query_start_loc[-1]) + N * batch, query_start_loc, "query_start_loc")
        if batch:
            need_fits("N", int(seq_lens.max()) + N, seq_lens, "seq_lens")
    return batch


def extend_queries(*, query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens):
    """Every query grows by N tokens: offsets shift by N per preceding request, sequences by N."""
    batch = check_extend_queries(query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens)
    for r in range(batch + 1):
        new_query_start_loc[r] = int(query_start_loc[r]) + N * r
    for r in range(batch):
        new_seq_lens[r] = int(seq_lens[r]) + N


# ---------------------------------------------------------------- eagle.step_slot_mapping

def check_step_slot_mapping(positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                            input_batch_size, clamped_positions, slot_mapping, values=True) -> int:
    need_dtype("positions", positions, *INDEX)
    need_ndim("positions", positions, 1)
    rows, b = len(positions), "B = len(positions)"
    need_dtype("block_table", block_table, *INDEX)
    need_ndim("block_table", block_table, 2)
    if block_table.shape[0] != rows or block_table.shape[1] < 1:
        raise ValueError(f"block_table: shape must be [B={rows}, NB >= 1] ({b}), got {list(block_table.shape)}")
    need_vector("seq_lens", seq_lens, rows, *INDEX, source=b)
    need_int("block_size", block_size, 1)
    need_int("max_model_len", max_model_len, 1)
    need_fits("max_model_len", max_model_len, seq_lens, "seq_lens")
    need_int("input_batch_size", input_batch_size)
    need_int("batch_size", batch_size)
    if batch_size > input_batch_size or batch_size > rows:
        raise ValueError(f"batch_size: must be <= input_batch_size ({input_batch_size}) and <= B ({rows}), "
                         f"got {batch_size}")
    need_same_dtype("clamped_positions", clamped_positions, positions, "positions")
    need_vector("clamped_positions", clamped_positions, rows, *INDEX, source=b)
    need_vector("slot_mapping", slot_mapping, input_batch_size, "int64", source="input_batch_size")
    if values and batch_size:  # padded rows are never read: they may hold anything
        need_at_least("positions", positions[:batch_size], 0)
        need_at_most("positions", positions[:batch_size], dtype_max(positions) - 1, "pos + 1 fits the dtype")
        need_at_least("seq_lens", seq_lens[:batch_size], 0)
        need_at_most("seq_lens", seq_lens[:batch_size], max_model_len, "at most max_model_len")
        need_at_least("block_table", block_table[:batch_size], 0)
        top = (2**63 - 1) // block_size - 1
        if top < dtype_max(block_table):
            need_at_most("block_table", block_table[:batch_size], top, "slots fit int64")
    return rows


def step_slot_mapping(*, positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                      input_batch_size, clamped_positions, slot_mapping):
    """One drafting step: each real row advances its position by one; past max_model_len it is clamped
    to 0, gets slot -1 and sequence length 1; otherwise its slot comes from the block table (the last
    block for positions beyond the table) and its sequence grows by one, capped at max_model_len. Padded
    rows (batch_size <= r < input_batch_size) only get slot -1."""
    check_step_slot_mapping(positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                            input_batch_size, clamped_positions, slot_mapping)
    blocks = block_table.shape[1]
    for r in range(input_batch_size):
        if r >= batch_size:
            slot_mapping[r] = -1
            continue
        p = int(positions[r]) + 1
        exceeded = p >= max_model_len
        cp = 0 if exceeded else p
        block = min(cp // block_size, blocks - 1)
        clamped_positions[r] = cp
        slot_mapping[r] = -1 if exceeded else int(block_table[r, block]) * block_size + cp % block_size
        seq_lens[r] = min(1 if exceeded else int(seq_lens[r]) + 1, max_model_len)
