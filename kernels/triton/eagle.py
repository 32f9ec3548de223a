"""Triton kernels of the `eagle` family: one launch per call, no host sync outside checked mode
(grids come from buffer shapes; per-request spans are looped over inside the program)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import cdiv, launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.oracles import eagle as oracle

ROWS = 128          # rows per program for the one-lane-per-row kernels
INT32_MAX = 2**31 - 1
BLOCK_ROWS = 32     # most rows per program of a [rows, columns] tile (B = 1024: 32 programs or more)
ROW_TILE = 1024     # elements of such a tile
COPY_ROWS = 2       # requests per program of copy_and_expand_inputs (a tile of 2 x 64 output slots)
STEP_ROWS = 64      # slots per program of step_slot_mapping (two warps)


def launch(kernel, programs: int, *args, **meta) -> None:
    if programs > 0:
        kernel[(programs,)](*args, **meta)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """Bool tensors go to Triton as uint8."""
    return t.view(torch.uint8) if t.dtype == torch.bool else t


@triton.jit
def store_next_token(tok, inside, rows, cols, live, discard_ptr, backup_ptr, next_ptr, count_ptr, vocab):
    """eagle.next_token_padded on a [rows, S] tile of ids (cells outside `inside` ignored): stores each live
    row's last valid id (its backup when it has none, or when the row is discarded) and its count of valid
    ids; returns the counts."""
    kept = tl.load(discard_ptr + rows, mask=live, other=1) == 0
    valid = inside & (tok != -1) & (tok < vocab) & kept[:, None]
    count = tl.sum(valid.to(tl.int32), axis=1)
    last = tl.max(tl.where(valid, cols[None, :], -1), axis=1)
    picked = tl.sum(tl.where(cols[None, :] == last[:, None], tok, 0), axis=1)
    backup = tl.load(backup_ptr + rows, mask=live, other=0)
    tl.store(next_ptr + rows, tl.where(count > 0, picked, backup), mask=live)
    tl.store(count_ptr + rows, count, mask=live)
    return count


@launcher
@triton.jit
def next_token_kernel(tok_ptr, row_stride, col_stride, discard_ptr, backup_ptr, next_ptr, count_ptr,
                      batch, width, vocab, BLOCK_B: tl.constexpr, BLOCK_S: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.arange(0, BLOCK_S)
    live = rows < batch
    tile = live[:, None] & (cols[None, :] < width)
    tok = tl.load(tok_ptr + rows[:, None].to(tl.int64) * row_stride + cols[None, :].to(tl.int64) * col_stride,
                  mask=tile, other=-1)
    store_next_token(tok, tile, rows, cols, live, discard_ptr, backup_ptr, next_ptr, count_ptr, vocab)


def row_block(width: int) -> tuple[int, int]:
    """(rows, columns) of a row-parallel [rows, columns] tile over rows `width` wide: ROW_TILE elements,
    between 1 and BLOCK_ROWS rows, so a large batch spreads over many programs."""
    columns = next_power_of_2(max(width, 1))
    return max(1, min(BLOCK_ROWS, ROW_TILE // columns)), columns


@prepared
def next_token_padded(*, sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                      next_token_ids, valid_sampled_tokens_count):
    """See `specverify.oracles.eagle.next_token_padded`. A [rows, S] tile per program; any strides."""
    batch = validate(oracle.check_next_token_padded, sampled_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                     next_token_ids, valid_sampled_tokens_count, values=reads_values(sampled_token_ids))
    width = sampled_token_ids.shape[1]
    block_b, block_s = row_block(width)
    launch(next_token_kernel, cdiv(batch, block_b), sampled_token_ids, sampled_token_ids.stride(0),
           sampled_token_ids.stride(1), as_bytes(discard_mask.contiguous()), backup_next_token_ids.contiguous(),
           next_token_ids, valid_sampled_tokens_count, batch, width, vocab_size, BLOCK_B=block_b, BLOCK_S=block_s)


@launcher
@triton.jit
def prepare_padded_kernel(cu_ptr, count_ptr, qsl_ptr, index_ptr, rejected_ptr, num_reqs, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = r < num_reqs
    end = tl.load(cu_ptr + r, mask=live, other=0)
    start = tl.load(cu_ptr + r - 1, mask=live & (r > 0), other=0)
    n = end - start
    rejected = tl.where(n > 0, n + 1 - tl.load(count_ptr + r, mask=live, other=0), 0)
    last = tl.load(qsl_ptr + r + 1, mask=live, other=0) - 1
    tl.store(rejected_ptr + r, rejected, mask=live)
    tl.store(index_ptr + r, (last - rejected).to(index_ptr.dtype.element_ty), mask=live)


@prepared
def prepare_inputs_padded(*, cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc, num_reqs,
                          token_indices_to_sample, num_rejected_tokens):
    """See `specverify.oracles.eagle.prepare_inputs_padded`. One lane per request."""
    validate(oracle.check_prepare_inputs_padded, cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc,
             num_reqs, token_indices_to_sample, num_rejected_tokens, values=reads_values(query_start_loc))
    launch(prepare_padded_kernel, cdiv(num_reqs, ROWS), cu_num_draft_tokens.contiguous(),
           valid_sampled_tokens_count.contiguous(), query_start_loc.contiguous(), token_indices_to_sample,
           num_rejected_tokens, num_reqs, BLOCK=ROWS)


@launcher
@triton.jit
def verify_prepare_kernel(draft_ptr, argmax_ptr, bonus_ptr, cu_ptr, greedy_ptr, out_ptr, o_row, o_col,
                          discard_ptr, backup_ptr, qsl_ptr, next_ptr, count_ptr, index_ptr, rejected_ptr,
                          batch, columns, vocab, num_reqs, HAS_MASK: tl.constexpr, BLOCK_B: tl.constexpr,
                          BLOCK_S: tl.constexpr):
    """Rows [pid * BLOCK_B, (pid + 1) * BLOCK_B), each through the three steps in registers: greedy
    verification (its emitted slots stored, the rest of the row read back as the caller left it), the
    count and last valid id of the row so formed, and the rejected tokens and index to sample."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.arange(0, BLOCK_S)
    live = rows < batch
    end = tl.load(cu_ptr + rows, mask=live, other=0).to(tl.int64)
    start = tl.load(cu_ptr + rows - 1, mask=live & (rows > 0), other=0).to(tl.int64)
    n = end - start
    # rejection.greedy: the argmax up to and at the first mismatching draft, else all of them and the bonus
    drafting = live[:, None] & (cols[None, :] < n[:, None])
    at = start[:, None] + cols[None, :]
    draft = tl.load(draft_ptr + at, mask=drafting, other=-1).to(tl.int64)
    argmax = tl.load(argmax_ptr + at, mask=drafting, other=0)
    first = tl.min(tl.where(drafting & (draft != argmax), cols[None, :], BLOCK_S), axis=1)
    emitted = tl.where(first == BLOCK_S, n + 1, first + 1)
    bonus = tl.load(bonus_ptr + rows, mask=live, other=0)
    emit = tl.where(cols[None, :] < n[:, None], argmax, bonus[:, None]).to(tl.int32)
    if HAS_MASK:
        greedy = tl.load(greedy_ptr + rows, mask=live, other=0) != 0
    else:
        greedy = live
    inside = live[:, None] & (cols[None, :] < columns)
    written = inside & greedy[:, None] & (cols[None, :] < emitted[:, None])
    slot = out_ptr + rows[:, None].to(tl.int64) * o_row + cols[None, :].to(tl.int64) * o_col
    tok = tl.where(written, emit, tl.load(slot, mask=inside & ~written, other=-1))
    tl.store(slot, emit, mask=written)
    # eagle.next_token_padded on the row as it now stands
    count = store_next_token(tok, inside, rows, cols, live, discard_ptr, backup_ptr, next_ptr, count_ptr, vocab)
    # eagle.prepare_inputs_padded for the first num_reqs rows
    real = rows < num_reqs
    rejected = tl.where(n > 0, n + 1 - count, 0)
    query_end = tl.load(qsl_ptr + rows + 1, mask=real, other=0)
    tl.store(rejected_ptr + rows, rejected.to(tl.int32), mask=real)
    tl.store(index_ptr + rows, (query_end - 1 - rejected).to(index_ptr.dtype.element_ty), mask=real)


@prepared
def verify_and_prepare_padded(*, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy,
                              max_spec_len, output_token_ids, discard_mask, backup_next_token_ids, vocab_size,
                              query_start_loc, num_reqs, next_token_ids, valid_sampled_tokens_count,
                              token_indices_to_sample, num_rejected_tokens):
    """See `specverify.oracles.eagle.verify_and_prepare_padded`. One launch, a [rows, S+1] tile per
    program; output_token_ids of any strides. The values the later steps check are checked after the
    launch (`oracle.check_verified`), when values are read at all."""
    values = reads_values(cu_num_draft_tokens)
    batch = validate(
        oracle.check_verify_and_prepare, draft_token_ids, target_argmax, bonus_token_ids, cu_num_draft_tokens, is_greedy, max_spec_len,
        output_token_ids, discard_mask, backup_next_token_ids, vocab_size, query_start_loc, num_reqs,
        next_token_ids, valid_sampled_tokens_count, token_indices_to_sample, num_rejected_tokens, values=values)
    columns = output_token_ids.shape[1]
    block_b, block_s = row_block(columns)
    greedy = next_token_ids if is_greedy is None else as_bytes(is_greedy.contiguous())  # placeholder when None
    launch(verify_prepare_kernel, cdiv(batch, block_b), draft_token_ids.contiguous(),
           target_argmax.contiguous(), bonus_token_ids.contiguous(), cu_num_draft_tokens.contiguous(), greedy,
           output_token_ids, output_token_ids.stride(0), output_token_ids.stride(1),
           as_bytes(discard_mask.contiguous()), backup_next_token_ids.contiguous(), query_start_loc.contiguous(),
           next_token_ids, valid_sampled_tokens_count, token_indices_to_sample, num_rejected_tokens,
           batch, columns, vocab_size, num_reqs, HAS_MASK=is_greedy is not None, BLOCK_B=block_b,
           BLOCK_S=block_s)
    if values:
        oracle.check_verified(cu_num_draft_tokens, output_token_ids, discard_mask, backup_next_token_ids,
                              vocab_size, query_start_loc, num_reqs, next_token_ids, valid_sampled_tokens_count,
                              token_indices_to_sample, num_rejected_tokens)


@triton.jit
def kept_tokens(qsl_ptr, drafts_ptr, sampled_ptr, r, live):
    """Per request r: its query length less its rejected tokens, and the rejected tokens (int64)."""
    qs = tl.load(qsl_ptr + r, mask=live, other=0).to(tl.int64)
    qn = tl.load(qsl_ptr + r + 1, mask=live, other=0).to(tl.int64)
    n = tl.load(drafts_ptr + r, mask=live, other=0).to(tl.int64)
    sampled = tl.load(sampled_ptr + r, mask=live, other=0).to(tl.int64)
    rejected = tl.where(n > 0, n + 1 - sampled, 0)
    return qn - qs - rejected, rejected, qs


@launcher
@triton.jit
def prepare_kernel(qsl_ptr, seq_ptr, drafts_ptr, sampled_ptr, new_qsl_ptr, index_ptr, new_seq_ptr, batch,
                   BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_T: tl.constexpr):
    """Program p: requests [p * BLOCK_R, (p + 1) * BLOCK_R). It sums the kept tokens of the requests
    before its own (BLOCK_S at a time), then writes its rows and its requests' token indices as a
    [BLOCK_R, BLOCK_T] tile per step."""
    pid = tl.program_id(0)
    b0 = pid * BLOCK_R
    before = tl.zeros([BLOCK_S], tl.int64)
    for s0 in range(0, b0, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        kept_before, _, _ = kept_tokens(qsl_ptr, drafts_ptr, sampled_ptr, s, s < b0)
        before += tl.where(s < b0, kept_before, 0)
    r = b0 + tl.arange(0, BLOCK_R)
    live = r < batch
    kept, rejected, qs = kept_tokens(qsl_ptr, drafts_ptr, sampled_ptr, r, live)
    kept = tl.where(live, kept, 0)
    ends = tl.sum(before, 0) + tl.cumsum(kept, 0)
    starts = ends - kept
    tl.store(new_qsl_ptr, tl.sum(before, 0).to(new_qsl_ptr.dtype.element_ty), mask=pid == 0)  # program 0: 0
    tl.store(new_qsl_ptr + r + 1, ends.to(new_qsl_ptr.dtype.element_ty), mask=live)
    seq = tl.load(seq_ptr + r, mask=live, other=0).to(tl.int64)
    tl.store(new_seq_ptr + r, (seq - rejected).to(new_seq_ptr.dtype.element_ty), mask=live)
    for k0 in range(0, tl.max(kept, 0), BLOCK_T):
        k = k0 + tl.arange(0, BLOCK_T)
        tl.store(index_ptr + starts[:, None] + k[None, :], (qs[:, None] + k[None, :]).to(index_ptr.dtype.element_ty),
                 mask=k[None, :] < kept[:, None])


@prepared
def prepare_inputs(*, query_start_loc, seq_lens, num_draft_tokens, num_sampled, new_query_start_loc,
                   token_indices, new_seq_lens):
    """See `specverify.oracles.eagle.prepare_inputs`. One program per BLOCK_ROWS requests; each sums the
    kept tokens of the requests before its own for its output offsets."""
    batch = validate(oracle.check_prepare_inputs, query_start_loc, seq_lens, num_draft_tokens, num_sampled,
                     new_query_start_loc, token_indices, new_seq_lens, values=reads_values(query_start_loc))
    launch(prepare_kernel, max(cdiv(batch, BLOCK_ROWS), 1), query_start_loc.contiguous(),
           seq_lens.contiguous(), num_draft_tokens.contiguous(), num_sampled.contiguous(), new_query_start_loc,
           token_indices, new_seq_lens, batch, BLOCK_R=BLOCK_ROWS, BLOCK_S=1024, BLOCK_T=16)


@launcher
@triton.jit
def copy_expand_kernel(tok_ptr, pos_ptr, next_ptr, qsl_ptr, qel_ptr, padding_id, parallel_id, P, batch,
                       ids_ptr, out_pos_ptr, rejected_ptr, masked_ptr, new_ptr, mapping_ptr,
                       SHIFT: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """ROWS requests per program (rows of the tile), their output spans written BLOCK slots at a time up to
    the longest of them; a row past the batch has an empty span."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    real = r < batch
    qs = tl.load(qsl_ptr + r, mask=real, other=0).to(tl.int64)
    qn = tl.load(qsl_ptr + r + 1, mask=real, other=0).to(tl.int64)
    qe = tl.load(qel_ptr + r, mask=real, other=0).to(tl.int64)
    next_id = tl.load(next_ptr + r, mask=real, other=0)
    kept = qe - qs + 1 - SHIFT
    out0 = qs + r * (P - SHIFT)
    total = tl.where(real, kept + P + qn - qe - 1, 0)
    first_pos = tl.load(pos_ptr + qs, mask=real, other=0).to(tl.int64)
    for j0 in range(0, tl.max(total, axis=0), BLOCK):
        j = j0 + tl.arange(0, BLOCK)[None, :]
        live = j < total[:, None]
        ids = tl.load(tok_ptr + (qs + SHIFT)[:, None] + j, mask=live & (j < kept[:, None]), other=0)
        is_masked = (j > kept[:, None]) & (j < (kept + P)[:, None])
        is_rejected = j >= (kept + P)[:, None]
        ids = tl.where(j == kept[:, None], next_id[:, None], ids)
        ids = tl.where(is_masked, parallel_id, ids)
        ids = tl.where(is_rejected, padding_id, ids)
        at = out0[:, None] + j
        tl.store(ids_ptr + at, ids.to(ids_ptr.dtype.element_ty), mask=live)
        tl.store(out_pos_ptr + at, tl.where(is_rejected, 0, first_pos[:, None] + j).to(out_pos_ptr.dtype.element_ty),
                 mask=live)
        tl.store(rejected_ptr + at, is_rejected.to(tl.uint8), mask=live)
        tl.store(masked_ptr + at, is_masked.to(tl.uint8), mask=live)
        tl.store(new_ptr + (r * P)[:, None] + j - kept[:, None], at.to(tl.int32),
                 mask=live & (j >= kept[:, None]) & (j < (kept + P)[:, None]))
        if SHIFT:
            tl.store(mapping_ptr + qs[:, None] + j, at.to(tl.int32), mask=real[:, None] & (j < (qn - qs)[:, None]))


@prepared
def copy_and_expand_inputs(*, target_token_ids, target_positions, next_token_ids, query_start_loc,
                           query_end_loc, padding_token_id, parallel_drafting_token_id, P, shift_input_ids,
                           out_input_ids, out_positions, out_is_rejected_token_mask, out_is_masked_token_mask,
                           out_new_token_indices, out_hidden_state_mapping, max_query_len=None):
    """See `specverify.oracles.eagle.copy_and_expand_inputs`. COPY_ROWS requests per program, looping over
    their output spans (the host hint `max_query_len` is checked, not needed)."""
    batch, _ = validate(oracle.check_copy_and_expand, target_token_ids, target_positions, next_token_ids,
                        query_start_loc, query_end_loc, padding_token_id, parallel_drafting_token_id, P,
                        shift_input_ids, out_input_ids, out_positions, out_is_rejected_token_mask,
                        out_is_masked_token_mask, out_new_token_indices, out_hidden_state_mapping, max_query_len,
                        values=reads_values(query_start_loc))
    launch(copy_expand_kernel, cdiv(batch, COPY_ROWS), target_token_ids.contiguous(), target_positions.contiguous(),
           next_token_ids.contiguous(), query_start_loc.contiguous(), query_end_loc.contiguous(),
           padding_token_id, parallel_drafting_token_id, P, batch, out_input_ids, out_positions,
           as_bytes(out_is_rejected_token_mask), as_bytes(out_is_masked_token_mask), out_new_token_indices,
           out_hidden_state_mapping, SHIFT=int(shift_input_ids), ROWS=COPY_ROWS, BLOCK=64)


@launcher
@triton.jit
def extend_kernel(qsl_ptr, seq_ptr, n, new_qsl_ptr, new_seq_ptr, batch, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offsets = tl.load(qsl_ptr + i, mask=i <= batch, other=0)
    tl.store(new_qsl_ptr + i, offsets + (i * n).to(offsets.dtype), mask=i <= batch)
    lengths = tl.load(seq_ptr + i, mask=i < batch, other=0)
    tl.store(new_seq_ptr + i, lengths + n, mask=i < batch)


@prepared
def extend_queries(*, query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens):
    """See `specverify.oracles.eagle.extend_queries`."""
    batch = validate(oracle.check_extend_queries, query_start_loc, seq_lens, N, new_query_start_loc, new_seq_lens,
                     values=reads_values(query_start_loc))
    launch(extend_kernel, cdiv(batch + 1, ROWS), query_start_loc.contiguous(), seq_lens.contiguous(), N,
           new_query_start_loc, new_seq_lens, batch, BLOCK=ROWS)


@launcher
@triton.jit
def step_slot_kernel(pos_ptr, table_ptr, row_stride, col_stride, seq_ptr, block_size, max_model_len,
                     blocks, batch_size, input_batch_size, clamped_ptr, slot_ptr, shift, BLOCK: tl.constexpr,
                     NARROW: tl.constexpr, POW2: tl.constexpr):
    """NARROW: max_model_len and block_size fit int32, so the clamped position does too and its division
    by block_size is a 32-bit one (a 64-bit division is a long instruction sequence on the GPU); POW2:
    block_size is 2**shift, so the division is a shift and the remainder a mask. Both independent loads
    (positions, seq_lens) are issued before the dependent block-table read."""
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    real = r < batch_size
    p = tl.load(pos_ptr + r, mask=real, other=0).to(tl.int64) + 1
    seq = tl.load(seq_ptr + r, mask=real, other=0).to(tl.int64)
    exceeded = p >= max_model_len
    cp = tl.where(exceeded, 0, p)
    if POW2:
        block, within = cp >> shift, cp & (block_size - 1)
    elif NARROW:
        narrow = cp.to(tl.int32)
        block, within = narrow // block_size, narrow % block_size
    else:
        block, within = cp // block_size, cp % block_size
    block = tl.minimum(block, blocks - 1).to(tl.int64)        # the table offset is 64-bit either way
    entry = tl.load(table_ptr + r.to(tl.int64) * row_stride + block * col_stride, mask=real, other=0)
    slot = tl.where(exceeded | (r >= batch_size), -1, entry.to(tl.int64) * block_size + within)
    tl.store(slot_ptr + r, slot, mask=r < input_batch_size)
    tl.store(clamped_ptr + r, cp.to(clamped_ptr.dtype.element_ty), mask=real)
    seq = tl.minimum(tl.where(exceeded, 1, seq + 1), max_model_len)
    tl.store(seq_ptr + r, seq.to(seq_ptr.dtype.element_ty), mask=real)


@prepared
def step_slot_mapping(*, positions, block_table, seq_lens, block_size, max_model_len, batch_size,
                      input_batch_size, clamped_positions, slot_mapping):
    """See `specverify.oracles.eagle.step_slot_mapping`. One lane per slot; any block_table strides."""
    validate(oracle.check_step_slot_mapping, positions, block_table, seq_lens, block_size, max_model_len, batch_size,
             input_batch_size, clamped_positions, slot_mapping, values=reads_values(positions))
    size = int(block_size)
    pow2 = (size & (size - 1)) == 0
    launch(step_slot_kernel, cdiv(input_batch_size, STEP_ROWS), positions.contiguous(), block_table,
           block_table.stride(0), block_table.stride(1), seq_lens, block_size, max_model_len,
           block_table.shape[1], batch_size, input_batch_size, clamped_positions, slot_mapping,
           size.bit_length() - 1 if pow2 else 0, BLOCK=STEP_ROWS, NARROW=max(max_model_len, block_size) <= INT32_MAX,
           POW2=pow2, num_warps=2)
