"""Torch kernels of the `eagle` family: vectorized, no per-request Python loop, no host sync on CUDA
outside checked mode (sizes come from buffer shapes, never from tensor values)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from specverify.kernels.checks import reads_values
from specverify.kernels.torch import rejection
from specverify.kernels.torch.layout import masked_store
from specverify.oracles import eagle as oracle


def next_token_padded(*, sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                      next_token_ids, valid_sampled_tokens_count):
    """See `specverify.oracles.eagle.next_token_padded`."""
    oracle.check_next_token_padded(sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                                   next_token_ids, valid_sampled_tokens_count,
                                   values=reads_values(sampled_token_ids))
    tok = sampled_token_ids
    valid = (tok != oracle.PLACEHOLDER) & (tok < vocab_size) & ~discard_mask[:, None]
    # column 0 of the padded row stands for "no valid id"; valid ids sit at their column + 1
    cols = torch.arange(1, tok.shape[1] + 1, device=tok.device)
    last = F.pad(torch.where(valid, cols, 0), (1, 0)).amax(dim=1, keepdim=True)
    picked = F.pad(tok, (1, 0)).gather(1, last).squeeze(1)
    count = valid.sum(dim=1)
    next_token_ids.copy_(torch.where(count > 0, picked, backup_next_token_ids))
    valid_sampled_tokens_count.copy_(count)


def prepare_inputs_padded(*, cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc, num_reqs,
                          token_indices_to_sample, num_rejected_tokens):
    """See `specverify.oracles.eagle.prepare_inputs_padded`."""
    oracle.check_prepare_inputs_padded(cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc,
                                       num_reqs, token_indices_to_sample, num_rejected_tokens,
                                       values=reads_values(query_start_loc))
    cu = cu_num_draft_tokens[:num_reqs].long()
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    rejected = oracle.rejected_tokens(counts, valid_sampled_tokens_count[:num_reqs].long())
    num_rejected_tokens[:num_reqs] = rejected
    token_indices_to_sample[:num_reqs] = query_start_loc[1:num_reqs + 1].long() - 1 - rejected


def verify_and_prepare_padded(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                              max_spec_len, output_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                              query_start_loc, num_reqs, next_token_ids, valid_sampled_tokens_count,
                              token_indices_to_sample, num_rejected_tokens):
    """See `specverify.oracles.eagle.verify_and_prepare_padded`: the three Torch kernels in turn."""
    rejection.greedy(draft_token_ids=draft_token_ids, target_argmax=target_argmax, bonus_token_ids=bonus_token_ids,
                     cu_num_draft_tokens=cu_num_draft_tokens, is_greedy=is_greedy, max_spec_len=max_spec_len,
                     output_token_ids=output_token_ids)
    with oracle.output_as_sampled():
        next_token_padded(sampled_token_ids=output_token_ids, discard_mask=discard_mask,
                          backup_next_token_ids=backup_next_token_ids, vocab_size=vocab_size,
                          next_token_ids=next_token_ids, valid_sampled_tokens_count=valid_sampled_tokens_count)
    prepare_inputs_padded(cu_num_draft_tokens=cu_num_draft_tokens,
                          valid_sampled_tokens_count=valid_sampled_tokens_count, query_start_loc=query_start_loc,
                          num_reqs=num_reqs, token_indices_to_sample=token_indices_to_sample,
                          num_rejected_tokens=num_rejected_tokens)


def prepare_inputs(*, query_start_loc, seq_lens, num_draft_tokens, num_sampled, new_query_start_loc,
                   token_indices, new_seq_lens):
    """See `specverify.oracles.eagle.prepare_inputs`. The number of kept tokens is token_indices' length."""
    oracle.check_prepare_inputs(query_start_loc, seq_lens, num_draft_tokens, num_sampled, new_query_start_loc,
                                token_indices, new_seq_lens, values=reads_values(query_start_loc))
    qsl = query_start_loc.long()
    rejected = oracle.rejected_tokens(num_draft_tokens.long(), num_sampled.long())
    new_qsl = F.pad(torch.cumsum(torch.diff(qsl) - rejected, 0), (1, 0))
    tokens = torch.arange(token_indices.shape[0], device=qsl.device)
    request = torch.searchsorted(new_qsl[1:], tokens, right=True)
    new_query_start_loc.copy_(new_qsl)
    token_indices.copy_(qsl[request] + tokens - new_qsl[request])
    new_seq_lens.copy_(seq_lens.long() - rejected)


def copy_and_expand_inputs(*, target_token_ids, target_positions, next_token_ids, query_start_loc,
                           query_end_loc, padding_token_id, parallel_drafting_token_id, P, shift_input_ids,
                           out_input_ids, out_positions, out_is_rejected_token_mask, out_is_masked_token_mask,
                           out_new_token_indices, out_hidden_state_mapping):
    """See `specverify.oracles.eagle.copy_and_expand_inputs`. Works over the whole output buffer and
    masks off what lies past the requests' spans."""
    batch, tokens = oracle.check_copy_and_expand(
        target_token_ids, target_positions, next_token_ids, query_start_loc, query_end_loc, padding_token_id,
        parallel_drafting_token_id, P, shift_input_ids, out_input_ids, out_positions,
        out_is_rejected_token_mask, out_is_masked_token_mask, out_new_token_indices, out_hidden_state_mapping,
        values=reads_values(query_start_loc))
    if batch == 0:
        return
    device = query_start_loc.device
    shift = int(shift_input_ids)
    qsl, qe = query_start_loc.long(), query_end_loc.long()
    qs = qsl[:-1]
    kept = qe - qs + 1 - shift
    out_starts = qsl + torch.arange(batch + 1, device=device) * (P - shift)   # out0 per request, then the end
    # every output slot: its request and its offset j in that request's span
    slots = torch.arange(out_input_ids.shape[0], device=device)
    r = torch.searchsorted(out_starts[1:], slots, right=True).clamp(max=batch - 1)
    j, k = slots - out_starts[r], kept[r]
    live = slots < out_starts[-1]
    source = (qs[r] + shift + j).clamp(0, max(tokens - 1, 0))
    rejected = j >= k + P
    masked = (j > k) & (j < k + P)
    ids = torch.where(j < k, target_token_ids[source].long(), next_token_ids.long()[r])
    ids = torch.where(masked, parallel_drafting_token_id, ids)
    ids = torch.where(rejected, padding_token_id, ids)
    masked_store(out_input_ids, live, ids)
    masked_store(out_positions, live, torch.where(rejected, 0, target_positions.long()[qs[r]] + j))
    # bool buffers as bytes (see masked_store)
    masked_store(out_is_rejected_token_mask.view(torch.uint8), live, rejected)
    masked_store(out_is_masked_token_mask.view(torch.uint8), live, masked)
    new = out_starts[:-1, None] + kept[:, None] + torch.arange(P, device=device)
    out_new_token_indices.copy_(new.reshape(-1))
    if shift_input_ids:
        sources = torch.arange(tokens, device=device)
        owner = torch.searchsorted(qsl[1:], sources, right=True).clamp(max=batch - 1)
        masked_store(out_hidden_state_mapping, sources < qsl[-1], out_starts[owner] + sources - qs[owner])


def extend_queries(*, query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens):
    """See `specverify.oracles.eagle.extend_queries`."""
    oracle.check_extend_queries(query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens,
                                values=reads_values(query_start_loc))
    steps = torch.arange(query_start_loc.shape[0], device=query_start_loc.device, dtype=query_start_loc.dtype)
    new_query_start_loc.copy_(query_start_loc + steps * N)
    new_seq_lens.copy_(seq_lens + N)


def step_slot_mapping(*, positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                      input_batch_size, clamped_positions, slot_mapping):
    """See `specverify.oracles.eagle.step_slot_mapping`. Slots are computed in int64."""
    oracle.check_step_slot_mapping(positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                                   input_batch_size, clamped_positions, slot_mapping,
                                   values=reads_values(positions))
    real = slice(0, batch_size)
    p = positions[real].long() + 1
    exceeded = p >= max_model_len
    cp = torch.where(exceeded, 0, p)
    block = (cp // block_size).clamp(max=block_table.shape[1] - 1)
    rows = torch.arange(batch_size, device=positions.device)
    slot = block_table[rows, block].long() * block_size + cp % block_size
    clamped_positions[real] = cp
    slot_mapping[real] = torch.where(exceeded, -1, slot)
    slot_mapping[batch_size:] = -1
    seq_lens[real] = torch.where(exceeded, 1, seq_lens[real].long() + 1).clamp(max=max_model_len)
