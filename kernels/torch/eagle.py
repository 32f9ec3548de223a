"""Torch kernels of the `eagle` family: vectorized, no per-request Python loop, no host sync on CUDA
outside checked mode (sizes come from buffer shapes, never from tensor values)."""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.kernels.torch import rejection
from specverify.kernels.torch.layout import as_flags, iota, low_bits, pair_rows, scalar
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
    `last_valid` of the verified rows, then the prepared counts from the requests' draft counts (cu less
    the starts verification computed). Every check runs before the work but those that read what
    verification writes (`oracle.check_verified`), which run after it when values are read at all."""
    values = reads_values(cu_num_draft_tokens)
    batch = oracle.check_verify_and_prepare(
        draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy, max_spec_len,
        output_token_ids, discard_mask, backup_next_token_ids, vocab_size, query_start_loc, num_reqs,
        next_token_ids, valid_sampled_tokens_count, token_indices_to_sample, num_rejected_tokens, values=values)
    if batch:
        prev = rejection.starts(cu_num_draft_tokens)
        rejection.verify_greedy(draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                                output_token_ids, prev)
        last_valid(output_token_ids, discard_mask, backup_next_token_ids, vocab_size, next_token_ids,
                   valid_sampled_tokens_count)
        if num_reqs:
            rejected = num_rejected_tokens[:num_reqs]
            rejected_into(rejected, (cu_num_draft_tokens - prev)[:num_reqs], valid_sampled_tokens_count[:num_reqs])
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


def put_live(out: torch.Tensor, live: torch.Tensor, values: torch.Tensor) -> None:
    """out[live] = values[live], every other element written back as it was (no sync, one launch when
    the dtypes agree, two when values must be cast). Bool outputs go through their bytes: CUDA would store
    a caller's non-canonical bool byte (say 0xa5) back as 0x01."""
    if out.dtype == torch.bool and values.dtype == torch.bool:
        out, values = out.view(torch.uint8), values.view(torch.uint8)
    if values.dtype == out.dtype:
        torch.where(live, values, out, out=out)
    else:
        out.copy_(torch.where(live, values, out))


def copy_and_expand_inputs(*, target_token_ids, target_positions, next_token_ids, query_start_loc,
                           query_end_loc, padding_token_id, parallel_drafting_token_id, P, shift_input_ids,
                           out_input_ids, out_positions, out_is_rejected_token_mask, out_is_masked_token_mask,
                           out_new_token_indices, out_hidden_state_mapping, max_query_len=None):
    """See `specverify.oracles.eagle.copy_and_expand_inputs` (the host hint is checked, not needed: sizes
    come from buffer shapes). Works over the whole output buffer and
    writes back the old value past the requests' spans. Output slot `o` of request r (span from out0[r]
    = qs + r*(P - shift)) is classified by e = o + shift - (qe + r*(P - shift)): e <= 0 a kept target
    token (source qe + e), e == 1 the next token, 1 < e <= P a parallel slot, e > P a rejected one."""
    batch, tokens = oracle.check_copy_and_expand(
        target_token_ids, target_positions, next_token_ids, query_start_loc, query_end_loc, padding_token_id,
        parallel_drafting_token_id, P, shift_input_ids, out_input_ids, out_positions,
        out_is_rejected_token_mask, out_is_masked_token_mask, out_new_token_indices, out_hidden_state_mapping,
        max_query_len, values=reads_values(query_start_loc))
    if batch == 0:
        return
    shift = int(shift_input_ids)
    step = P - shift
    size = out_input_ids.shape[0]
    qsl, qe = query_start_loc, query_end_loc
    out0 = torch.add(qsl, iota(batch + 1, qsl), alpha=step)                 # then the spans' end
    # per request, gathered per slot in one launch: the span's marker qe + r*(P - shift), the position
    # offset (position = start[r] + o) and the next token
    per = torch.empty((3, batch), device=qsl.device, dtype=torch.long)
    ends = torch.add(qe, iota(batch, qe), alpha=step, out=per[0])
    torch.sub(target_positions[qsl[:batch]], out0[:batch], out=per[1])
    per[2].copy_(next_token_ids)
    torch.add(ends[:, None], iota(P + 1, qe)[1 - shift:P + 1 - shift], out=out_new_token_indices.view(batch, P))
    slots = iota(size + 1, qsl)
    request = torch.searchsorted(out0[1:batch], slots[:size], right=True)
    mark, start, following = per[:, request]
    e = slots[shift:size + shift] - mark
    live = slots[:size] < out0[batch:]
    rejected = e > P
    put_live(out_is_rejected_token_mask, live, rejected)
    beyond = e > 1
    put_live(out_is_masked_token_mask, live, beyond ^ rejected)
    position = low_bits(start.add_(slots[:size]), out_positions.dtype)
    put_live(out_positions, live, torch.where(rejected, scalar(0, position, position.dtype), position))
    # a kept slot's source: qe[r] + e = o + shift - r*(P - shift); clamped for the other slots
    source = target_token_ids[torch.add(slots[shift:size + shift], request, alpha=-step).clamp_(max=tokens - 1)]
    # the ids as Python scalars (cached scalars would depend on the call)
    ids = low_bits(following, out_input_ids.dtype).masked_fill(beyond, parallel_drafting_token_id)
    put_live(out_input_ids, live, torch.where(e <= 0, source, ids.masked_fill_(rejected, padding_token_id)))
    if shift_input_ids:   # token t of request r goes to t + r*(P - 1)
        owner = torch.searchsorted(qsl[1:batch].contiguous(), slots[:tokens], right=True)
        mapping = torch.add(slots[:tokens], owner, alpha=step, out=torch.empty_like(out_hidden_state_mapping))
        put_live(out_hidden_state_mapping, slots[:tokens] < qsl[batch:], mapping)


def extend_queries(*, query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens):
    """See `specverify.oracles.eagle.extend_queries`."""
    oracle.check_extend_queries(query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens,
                                values=reads_values(query_start_loc))
    steps = iota(query_start_loc.shape[0], query_start_loc, query_start_loc.dtype)
    torch.add(query_start_loc, steps, alpha=N, out=new_query_start_loc)
    torch.add(seq_lens, N, out=new_seq_lens)


def step_slot_mapping(*, positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                      input_batch_size, clamped_positions, slot_mapping):
    """See `specverify.oracles.eagle.step_slot_mapping`. Slots are computed in int64; rows from
    batch_size on get slot -1 and nothing else. The new length is one addcmul: 1 + room * min(seq_len,
    max_model_len - 1)."""
    oracle.check_step_slot_mapping(positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                                   input_batch_size, clamped_positions, slot_mapping,
                                   values=reads_values(positions))
    slot_mapping[batch_size:] = -1
    if batch_size == 0:
        return
    real = slice(0, batch_size)
    ahead = positions[real] + 1                           # fits: positions are below the dtype's max
    room = ahead < max_model_len
    torch.where(room, ahead, scalar(0, ahead), out=clamped_positions[real])
    size = iota(block_size + 1, positions)[block_size:]    # [block_size], int64: the quotient and the
    block = torch.div(ahead, size, rounding_mode="floor").clamp_(max=block_table.shape[1] - 1)
    base = block_table[iota(batch_size, positions), block]
    slot = torch.add(ahead % size, base, alpha=block_size)   # remainder come out in int64
    torch.where(room, slot, scalar(-1, slot), out=slot_mapping[real])
    # 1 + min(seq_len, max_model_len - 1) with room (min(seq_len + 1, max_model_len)), else 1
    torch.addcmul(scalar(1, seq_lens), seq_lens[real].clamp(max=max_model_len - 1), room, out=seq_lens[real])
