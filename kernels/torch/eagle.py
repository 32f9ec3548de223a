"""Torch kernels of the `eagle` family: vectorized, no per-request Python loop, no host sync on CUDA
outside checked mode (sizes come from buffer shapes, never from tensor values)."""
from __future__ import annotations

import torch

from specverify.kernels.validation import reads_values
from specverify.kernels.torch import rejection
from specverify.kernels.torch.layout import (SPAN_LIVE, SPAN_PARALLEL, SPAN_REJECTED, as_flags, iota, low_bits,
                                             pair_rows, scalar, span_codes, span_flag)
from specverify.oracles import eagle as oracle


def next_token_padded(*, sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                      next_token_ids, valid_sampled_tokens_count):
    """See `specverify.oracles.eagle.next_token_padded` (`last_valid`)."""
    oracle.check_next_token_padded(sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                                   next_token_ids, valid_sampled_tokens_count,
                                   values=reads_values(sampled_token_ids))
    batch, width = sampled_token_ids.shape
    if batch == 0:
        return
    if width == 0:
        next_token_ids.copy_(backup_next_token_ids)
        valid_sampled_tokens_count.zero_()
        return
    last_valid(sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size, next_token_ids,
               valid_sampled_tokens_count)


def last_valid(tok, discard, backup, vocab_size, next_token_ids, counts) -> None:
    """Per row of tok [B, W > 0]: the count of valid ids (in [0, V), the row not discarded) into `counts`
    and the last valid one (else the backup) into `next_token_ids`. The ids in range are those a clamp
    leaves; a row's last is one row max of a key (column + 1) * 2**32 + id over valid entries (the
    backup elsewhere), whose low 32 bits are the id. Valid is written as int32 0/1: summed with no cast."""
    in_range = tok.clamp(0, vocab_size - 1) == tok
    valid = torch.gt(in_range, discard[:, None], out=torch.empty(tok.shape, device=tok.device, dtype=torch.int32))
    torch.sum(valid, dim=1, out=counts)
    key = torch.add(tok, iota(tok.shape[1] + 1, tok)[1:], alpha=2**32)
    best = torch.where(as_flags(valid), key, backup[:, None]).amax(dim=1)
    next_token_ids.copy_(best)   # int64 -> int32 keeps the low 32 bits: the id, or the backup


def rejected_into(out: torch.Tensor, drafts: torch.Tensor, emitted: torch.Tensor) -> None:
    """out = n + 1 - emitted where n > 0, else 0, for emitted in [0, n + 1] (valid inputs): written as
    n + min(1 - emitted, n), three launches and no branch."""
    torch.add(drafts, torch.minimum(1 - emitted, drafts), out=out)


def prepare_inputs_padded(*, cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc, num_reqs,
                          token_indices_to_sample, num_rejected_tokens):
    """See `specverify.oracles.eagle.prepare_inputs_padded`. Rows from num_reqs on are never written."""
    oracle.check_prepare_inputs_padded(cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc,
                                       num_reqs, token_indices_to_sample, num_rejected_tokens,
                                       values=reads_values(query_start_loc))
    if num_reqs == 0:
        return
    cu = cu_num_draft_tokens[:num_reqs]
    counts = torch.empty_like(cu)
    counts[:1] = cu[:1]
    torch.sub(cu[1:], cu[:-1], out=counts[1:])
    rejected = num_rejected_tokens[:num_reqs]
    rejected_into(rejected, counts, valid_sampled_tokens_count[:num_reqs])
    torch.sub(query_start_loc[1:num_reqs + 1] - 1, rejected, out=token_indices_to_sample[:num_reqs])


def verify_and_prepare_padded(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                              max_spec_len, output_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                              query_start_loc, num_reqs, next_token_ids, valid_sampled_tokens_count,
                              token_indices_to_sample, num_rejected_tokens):
    """See `specverify.oracles.eagle.verify_and_prepare_padded`, fused: the greedy verification, then
    `last_valid` of the verified rows, then the prepared counts from the draft counts verification
    computed. Every check runs before the work but those that read what verification writes
    (`oracle.check_verified`), which run after it when values are read at all."""
    values = reads_values(cu_num_draft_tokens)
    batch = oracle.check_verify_and_prepare(
        draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy, max_spec_len,
        output_token_ids, discard_mask, backup_next_token_ids, vocab_size, query_start_loc, num_reqs,
        next_token_ids, valid_sampled_tokens_count, token_indices_to_sample, num_rejected_tokens, values=values)
    if batch:
        drafted = rejection.verify_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens,
                                          is_greedy, output_token_ids)
        last_valid(output_token_ids, discard_mask, backup_next_token_ids, vocab_size, next_token_ids,
                   valid_sampled_tokens_count)
        if num_reqs:
            rejected = num_rejected_tokens[:num_reqs]
            rejected_into(rejected, drafted[:num_reqs], valid_sampled_tokens_count[:num_reqs])
            torch.sub(query_start_loc[1:num_reqs + 1] - 1, rejected, out=token_indices_to_sample[:num_reqs])
    if values:
        oracle.check_verified(cu_num_draft_tokens, output_token_ids, discard_mask, backup_next_token_ids,
                              vocab_size, query_start_loc, num_reqs, next_token_ids, valid_sampled_tokens_count,
                              token_indices_to_sample, num_rejected_tokens)


def prepare_inputs(*, query_start_loc, seq_lens, num_draft_tokens, num_sampled, new_query_start_loc,
                   token_indices, new_seq_lens):
    """See `specverify.oracles.eagle.prepare_inputs`. The number of kept tokens is token_indices' length;
    kept token t of request r sits at t + (tokens rejected before r)."""
    oracle.check_prepare_inputs(query_start_loc, seq_lens, num_draft_tokens, num_sampled, new_query_start_loc,
                                token_indices, new_seq_lens, values=reads_values(query_start_loc))
    batch = seq_lens.shape[0]
    rejected = pair_rows(batch + 1, seq_lens)       # both rows: 0, then the rejected count of each request
    rejected[:, 0] = 0
    rejected_into(rejected[:, 1:], num_draft_tokens.expand(2, batch), num_sampled)
    before = torch.cumsum(rejected, dim=1)[0]        # tokens rejected before each request, then in all
    torch.sub(query_start_loc, before, out=new_query_start_loc)
    torch.sub(seq_lens, rejected[0, 1:], out=new_seq_lens)
    tokens = iota(token_indices.shape[0], token_indices, new_query_start_loc.dtype)
    request = torch.searchsorted(new_query_start_loc[1:], tokens, right=True)
    torch.add(tokens, before[request], out=token_indices)


def copy_and_expand_inputs(*, target_token_ids, target_positions, next_token_ids, query_start_loc,
                           query_end_loc, padding_token_id, parallel_drafting_token_id, P, shift_input_ids,
                           out_input_ids, out_positions, out_is_rejected_token_mask, out_is_masked_token_mask,
                           out_new_token_indices, out_hidden_state_mapping, max_query_len=None):
    """See `specverify.oracles.eagle.copy_and_expand_inputs` (the host hint is checked, not needed: sizes
    come from buffer shapes). Request r's span starts at out0[r] = qs + r*(P - shift); its next token sits
    at nx[r] = qe + r*(P - shift) + 1 - shift. One search of every output slot o in the sorted boundaries
    [out0[r], out0[r], nx[r] + i for i in 0..P] per request (then out0[B]) counts k = r*(P + 3) + c: the
    request r and the slot's class c (`span_codes`: 1 kept, 2 next, 3..P+1 parallel, P+2 rejected, and 0
    with r = B past every span, a slot left as it was). One take of the class codes gives each slot's
    flags; one gather of a [2, (B + 1)*(P + 3)] table per (request, class) gives o - position and o + 1 -
    the id's source: the source is o + shift - r*(P - shift) - N for a kept token, qe - N or after for the
    other classes (any id, overwritten), in [-N, 1] (an index from the end) for every slot. The next
    tokens are put at the first new-token index of each request, the parallel and padding ids filled by
    flag."""
    batch, tokens = oracle.check_copy_and_expand(
        target_token_ids, target_positions, next_token_ids, query_start_loc, query_end_loc, padding_token_id,
        parallel_drafting_token_id, P, shift_input_ids, out_input_ids, out_positions,
        out_is_rejected_token_mask, out_is_masked_token_mask, out_new_token_indices, out_hidden_state_mapping,
        max_query_len, values=reads_values(query_start_loc))
    if batch == 0:
        return
    shift = int(shift_input_ids)
    step, period = P - shift, P + 3
    size = out_input_ids.shape[0]
    qsl, qe = query_start_loc, query_end_loc
    ar = iota(max(size + 1, tokens + batch * step + period), qsl)   # every view below reads this arange
    bounds = torch.empty((batch + 1) * period, device=qsl.device, dtype=torch.long)
    torch.add(qsl[:, None].expand(batch + 1, 2), ar.as_strided((batch + 1, 2), (step, 0), 0),
              out=bounds.as_strided((batch + 1, 2), (period, 1), 0))
    torch.add(qe[:, None].expand(batch, P + 1), ar.as_strided((batch, P + 1), (step, 1), 1 - shift),
              out=bounds.as_strided((batch, P + 1), (period, 1), 2))
    torch.add(qe[:, None], ar.as_strided((batch, P), (step, 1), 1 - shift), out=out_new_token_indices.view(batch, P))
    found = torch.searchsorted(bounds[1:batch * period + 1], ar[:size], right=True)
    codes = torch.take(span_codes(P, qsl).expand(batch + 1, period), found)
    live, rejected, parallel = (span_flag(codes, flag) for flag in (SPAN_LIVE, SPAN_REJECTED, SPAN_PARALLEL))
    for out, flag in ((out_is_rejected_token_mask, rejected), (out_is_masked_token_mask, parallel)):
        raw = out.view(torch.uint8)   # bytes: CUDA would store a non-canonical bool byte back as 0x01
        torch.where(live, flag.view(torch.uint8), raw, out=raw)
    table = torch.empty((2, (batch + 1) * period), device=qsl.device, dtype=torch.long)
    firsts = torch.index_select(target_positions, 0, qsl[:batch])
    torch.sub(bounds.as_strided((batch, period), (period, 0), 1), firsts[:, None].expand(batch, period),
              out=table[0, :batch * period].view(batch, period))   # out0[r] - target_positions[qs]
    table[1].view(batch + 1, period).copy_(ar.as_strided((batch + 1, period), (step, 1), tokens - shift))
    position, source = torch.sub(ar.as_strided((2, size), (1, 1), 0), table[:, found],
                                 out=torch.empty((2, size), device=qsl.device, dtype=torch.long))
    torch.where(live, low_bits(position, out_positions.dtype), out_positions, out=out_positions)
    out_positions.masked_fill_(rejected, 0)
    torch.where(live, target_token_ids[source], out_input_ids, out=out_input_ids)
    out_input_ids.index_put_((bounds.as_strided((batch,), (period,), 2),), next_token_ids)   # at nx[r], int64
    out_input_ids.masked_fill_(parallel, parallel_drafting_token_id).masked_fill_(rejected, padding_token_id)
    if shift_input_ids:   # token t of request r goes to t + r*(P - 1); B past the last query
        token = iota(tokens, qsl, qsl.dtype)   # searched in qsl's dtype: no cast
        owner = torch.searchsorted(qsl[1:], token, right=True)
        mapping = low_bits(torch.add(token, owner, alpha=step), torch.int32)
        torch.where(owner < batch, mapping, out_hidden_state_mapping, out=out_hidden_state_mapping)


def extend_queries(*, query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens):
    """See `specverify.oracles.eagle.extend_queries`."""
    oracle.check_extend_queries(query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens,
                                values=reads_values(query_start_loc))
    steps = iota(query_start_loc.shape[0], query_start_loc, query_start_loc.dtype)
    torch.add(query_start_loc, steps, alpha=N, out=new_query_start_loc)
    torch.add(seq_lens, N, out=new_seq_lens)


def step_slot_mapping(*, positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                      input_batch_size, clamped_positions, slot_mapping):
    """See `specverify.oracles.eagle.step_slot_mapping`. Rows from batch_size on get slot -1 and nothing
    else. A real row has room when position + 1 < max_model_len; its clamped position is room * (position
    + 1), one addcmul that needs no position + 1. The slot is computed in int64 from that clamped position
    (0 in a row without room, whose slot is -1 anyway); the block is clamped into the table only when
    max_model_len reaches past it. The new length is one addcmul: 1 + room * min(seq_len, max_model_len - 1)."""
    oracle.check_step_slot_mapping(positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                                   input_batch_size, clamped_positions, slot_mapping,
                                   values=reads_values(positions))
    slot_mapping[batch_size:] = -1
    if batch_size == 0:
        return
    real = slice(0, batch_size)
    room = positions[real] < max_model_len - 1            # position + 1 < max_model_len; no overflow
    ahead = torch.addcmul(room, positions[real], room, out=clamped_positions[real])
    size = iota(block_size + 1, positions)[block_size:]    # [block_size], int64: the quotient and the
    block = torch.div(ahead, size, rounding_mode="floor")  # remainder come out in int64
    if max_model_len > block_size * block_table.shape[1]:  # positions past the table use its last block
        block.clamp_(max=block_table.shape[1] - 1)
    base = block_table[iota(batch_size, positions), block]
    slot = torch.add(ahead % size, base, alpha=block_size)
    torch.where(room, slot, scalar(-1, slot), out=slot_mapping[real])
    # 1 + min(seq_len, max_model_len - 1) with room (min(seq_len + 1, max_model_len)), else 1
    torch.addcmul(scalar(1, seq_lens), seq_lens[real].clamp(max=max_model_len - 1), room, out=seq_lens[real])
