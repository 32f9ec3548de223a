"""Triton kernels of the `graph` family: one launch per call, no host sync outside checked mode (grids
and loop bounds come from shapes, except the token loops of long queries; every input is read through
its strides). Each program does one round of independent loads and then its stores: no loop walks the
batch one request at a time, and running sums are `tl.cumsum` over a block in registers.

Running sums feeding the int32 `cu_seqlens` are taken in int32: two's-complement sums wrap modulo
2**32, so they give the bytes of the int64 sums narrowed to int32 for any input."""
from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import cdiv, launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.oracles import graph as oracle

TOKENS = 256        # tokens per program (fill)
TILE = 1024         # elements of a block-table tile per program (fill)
LENS = 1024         # requests per block of a running sum
REQUESTS = 16       # requests per program (step_context)
WIDTH = 64          # most query tokens per request per step of a token tile (step_context, dsa)
DSA_TILE = 2048     # block-table entries written per program per step (dsa)
DSA_ONE_REQUEST = 256   # CUDA dsa batches up to this size get one request per program (more programs, shorter
                        # ones); the interpreter packs several from B = 2 on, so the CPU checks run that path too


def lanes(n: int, most: int) -> int:
    """A power-of-two block of lanes: n rounded up, at least 1 and at most `most`."""
    return min(max(next_power_of_2(n), 1), most)


# ---------------------------------------------------------------- graph.fill_common_inputs

@launcher
@triton.jit
def fill_kernel(ids_ptr, ids_stride, pos_ptr, pos_stride, table_ptr, table_rows, table_cols, qsl_ptr, qsl_stride,
                q_ptr, q_stride, kv_ptr, kv_stride, pad_ptr, pad_stride, pad_len,
                out_ids_ptr, out_pos_ptr, out_table_ptr, qkv_ptr, cu_ptr,
                batch, blocks, tokens, max_batch, max_blocks, max_tokens, token_programs, row_programs,
                BLOCK_T: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_L: tl.constexpr):
    """Programs by id: token tiles, then tiles of block-table rows, then two length programs (0: the
    q_start_loc and q rows and cu_seqlens[0]; 1: the kv row and cu_seqlens[1])."""
    pid = tl.program_id(0)
    if pid < token_programs:
        t = pid * BLOCK_T + tl.arange(0, BLOCK_T)
        real = t < tokens
        t64 = t.to(tl.int64)
        ids = tl.load(ids_ptr + t64 * ids_stride, mask=real, other=0)
        noise = tl.load(pad_ptr + t64 * pad_stride, mask=(t >= tokens) & (t < max_tokens), other=0)
        tl.store(out_ids_ptr + t, tl.where(real, ids, noise), mask=t < max_tokens)
        tl.store(out_pos_ptr + t, tl.load(pos_ptr + t64 * pos_stride, mask=real, other=0), mask=real)
    elif pid < token_programs + row_programs:
        r = ((pid - token_programs) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
        for c0 in range(0, max_blocks, BLOCK_C):
            c = c0 + tl.arange(0, BLOCK_C)
            source = (r[:, None] < batch) & (c[None, :] < blocks)
            entry = tl.load(table_ptr + r[:, None] * table_rows + c[None, :].to(tl.int64) * table_cols,
                            mask=source, other=0)
            tl.store(out_table_ptr + r[:, None] * max_blocks + c[None, :], entry.to(tl.int32),
                     mask=(r[:, None] < max_batch) & (c[None, :] < max_blocks))
    else:
        kv_row = pid - token_programs - row_programs
        first = tl.full([BLOCK_L], kv_row, tl.int32) == 0     # a vector: scalar masks trip the interpreter
        sums = cu_ptr + kv_row * (max_batch + 1)
        tl.store(sums, 0)
        carry = tl.full([], 0, tl.int32)
        for b0 in range(0, max_batch, BLOCK_L):       # one step while MB <= BLOCK_L
            b = b0 + tl.arange(0, BLOCK_L)
            inside, real = b < max_batch, b < batch
            b64 = b.to(tl.int64)
            start = tl.load(qsl_ptr + b64 * qsl_stride, mask=real & first, other=0).to(tl.int32)
            q = tl.load(q_ptr + b64 * q_stride, mask=real & first, other=0).to(tl.int32)
            kv = tl.load(kv_ptr + b64 * kv_stride, mask=real & ~first, other=0).to(tl.int32)
            length = tl.where(real, q + kv, tl.where(inside, pad_len, 0).to(tl.int32))
            tl.store(qkv_ptr + b, start, mask=inside & first)
            tl.store(qkv_ptr + (1 + kv_row) * max_batch + b, length, mask=inside)
            tl.store(sums + 1 + b, carry + tl.cumsum(length, 0), mask=inside)
            if b0 + BLOCK_L < max_batch:
                carry += tl.sum(length, 0)


@prepared
def fill_common_inputs(*, input_ids, position_ids, block_offsets, q_start_loc, q_seqlens, kv_seqlens, pad_ids,
                       pad_query_len, graph_input_ids, graph_position_ids, graph_block_offsets, graph_qkv_lens,
                       graph_cu_seqlens):
    """See `specverify.oracles.graph.fill_common_inputs`. One launch fills every graph buffer; the
    capacity checks read shapes only."""
    batch, blocks, tokens = validate(oracle.check_fill_common_inputs, input_ids, position_ids, block_offsets,
                                     q_start_loc, q_seqlens, kv_seqlens, pad_ids, pad_query_len, graph_input_ids,
                                     graph_position_ids, graph_block_offsets, graph_qkv_lens, graph_cu_seqlens,
                                     values=reads_values(input_ids))
    max_batch, max_blocks = graph_block_offsets.shape
    max_tokens = graph_input_ids.shape[0]
    width = lanes(max_blocks, 1024)
    rows = lanes(max(TILE // width, 1), lanes(max_batch, TILE))
    token_programs = cdiv(max_tokens, TOKENS)
    row_programs = cdiv(max_batch, rows) if max_blocks else 0
    fill_kernel[(token_programs + row_programs + 2,)](
        input_ids, input_ids.stride(0), position_ids, position_ids.stride(0),
        block_offsets, block_offsets.stride(0), block_offsets.stride(1), q_start_loc, q_start_loc.stride(0),
        q_seqlens, q_seqlens.stride(0), kv_seqlens, kv_seqlens.stride(0), pad_ids, pad_ids.stride(0), pad_query_len,
        graph_input_ids, graph_position_ids, graph_block_offsets, graph_qkv_lens, graph_cu_seqlens,
        batch, blocks, tokens, max_batch, max_blocks, max_tokens, token_programs, row_programs,
        BLOCK_T=TOKENS, BLOCK_R=rows, BLOCK_C=width, BLOCK_L=lanes(max_batch, LENS))


# ---------------------------------------------------------------- graph.step_context

@triton.jit
def query_rows(q_ptr, q_stride, hist_ptr, hist_stride, ign_ptr, ign_stride, rows, mask, width,
               UNIFORM: tl.constexpr):
    """For the requests `rows` (where `mask`): query length (`width` when UNIFORM), history and ignored
    history, as int64; 0 elsewhere."""
    at = rows.to(tl.int64)
    if UNIFORM:
        q = tl.where(mask, width, 0).to(tl.int64)
    else:
        q = tl.load(q_ptr + at * q_stride, mask=mask, other=0).to(tl.int64)
    h = tl.load(hist_ptr + at * hist_stride, mask=mask, other=0).to(tl.int64)
    ign = tl.load(ign_ptr + at * ign_stride, mask=mask, other=0).to(tl.int64)
    return q, h, ign


@triton.jit
def store_positions(pos_ptr, starts, history, q, j0, BLOCK_W: tl.constexpr):
    """Tokens j0 + [0, BLOCK_W) of each request (those below its q): position history + j at starts + j."""
    j = j0 + tl.arange(0, BLOCK_W)
    tl.store(pos_ptr + (starts[:, None] + j[None, :]), history[:, None] + j[None, :], mask=j[None, :] < q[:, None])


@launcher
@triton.jit
def step_context_kernel(q_ptr, q_stride, hist_ptr, hist_stride, ign_ptr, ign_stride, start_ptr, kv_out_ptr,
                        pos_ptr, cu_ptr, batch, width, UNIFORM: tl.constexpr, BLOCK_R: tl.constexpr,
                        BLOCK_W: tl.constexpr, BLOCK_P: tl.constexpr):
    """Program p: requests [p * BLOCK_R, (p + 1) * BLOCK_R). Its loads (its own rows, and the requests
    before them in blocks of BLOCK_P) are independent; the sums before it are block reductions, its
    rows a cumsum; it writes its tokens' positions as a [BLOCK_R, BLOCK_W] tile, looping only for
    queries longer than BLOCK_W. UNIFORM: every query is `width` long (q_seqlens is not read)."""
    pid = tl.program_id(0)
    b0 = pid * BLOCK_R
    b = b0 + tl.arange(0, BLOCK_R)
    real = b < batch
    q, h, ign = query_rows(q_ptr, q_stride, hist_ptr, hist_stride, ign_ptr, ign_stride, b, real, width, UNIFORM)
    before_q = tl.zeros([BLOCK_P], tl.int32)
    before_kv = tl.zeros([BLOCK_P], tl.int32)
    for s0 in range(0, b0, BLOCK_P):               # one step while B <= BLOCK_P
        s = s0 + tl.arange(0, BLOCK_P)
        sq, sh, sign = query_rows(q_ptr, q_stride, hist_ptr, hist_stride, ign_ptr, ign_stride, s, s < b0, width,
                                  UNIFORM)
        before_q += sq.to(tl.int32)
        before_kv += (sq + sh - sign).to(tl.int32)
    if UNIFORM:
        pre_q = b0 * width
    else:
        pre_q = tl.sum(before_q, 0)
    kv = q + h - ign
    q32 = q.to(tl.int32)
    ends = pre_q + tl.cumsum(q32, 0)
    starts = ends - q32
    tl.store(start_ptr + b, starts.to(start_ptr.dtype.element_ty), mask=real)
    tl.store(kv_out_ptr + b, kv.to(kv_out_ptr.dtype.element_ty), mask=real)
    tl.store(cu_ptr + 1 + b, ends, mask=real)
    tl.store(cu_ptr + batch + 2 + b, tl.sum(before_kv, 0) + tl.cumsum(kv.to(tl.int32), 0), mask=real)
    tl.store(cu_ptr, 0, mask=pid == 0)            # program 0 writes the leading zeros
    tl.store(cu_ptr + batch + 1, 0, mask=pid == 0)
    store_positions(pos_ptr, starts, h, q32, 0, BLOCK_W)
    if UNIFORM:
        longest = width
    else:
        longest = tl.max(q32, 0)
    for j0 in range(BLOCK_W, longest, BLOCK_W):   # queries longer than BLOCK_W only
        store_positions(pos_ptr, starts, h, q32, j0, BLOCK_W)


@prepared
def step_context(*, q_seqlens, history_lengths, num_ignored_history, uniform_layout, q_start_loc, kv_seqlens,
                 position_ids, cu_seqlens):
    """See `specverify.oracles.graph.step_context`. One launch; the uniform path takes the query length
    from the shapes (N // B) and never reads q_seqlens. The token tile's width is the mean query length
    (exact on the uniform path), so a typical step writes its positions in one step."""
    batch, tokens = validate(oracle.check_step_context, q_seqlens, history_lengths, num_ignored_history,
                             uniform_layout, q_start_loc, kv_seqlens, position_ids, cu_seqlens,
                             values=reads_values(q_seqlens))
    width = tokens // batch if batch else 0
    span = lanes(cdiv(tokens, batch) if batch else 1, WIDTH)
    rows = min(lanes(batch, REQUESTS), max(1024 // span, 1))
    step_context_kernel[(max(cdiv(batch, rows), 1),)](
        q_seqlens, q_seqlens.stride(0), history_lengths, history_lengths.stride(0), num_ignored_history,
        num_ignored_history.stride(0), q_start_loc, kv_seqlens, position_ids, cu_seqlens, batch, width,
        UNIFORM=uniform_layout, BLOCK_R=rows, BLOCK_W=span, BLOCK_P=lanes(batch, LENS))


# ---------------------------------------------------------------- graph.dsa_indexer_metadata

@triton.jit
def dsa_columns(out_table_ptr, table_ptr, table_rows, table_cols, b, fetch, row, live, c0, blocks,
                BLOCK_C: tl.constexpr):
    """Columns c0 + [0, BLOCK_C) of the requests' block rows (read where `fetch`) copied into their token rows."""
    c = c0 + tl.arange(0, BLOCK_C)
    entry = tl.load(table_ptr + b.to(tl.int64)[:, None] * table_rows + c[None, :].to(tl.int64) * table_cols,
                    mask=fetch[:, None] & (c[None, :] < blocks), other=0)
    tl.store(out_table_ptr + row[:, :, None] * blocks + c[None, None, :], entry.to(tl.int32)[:, None, :],
             mask=live[:, :, None] & (c[None, None, :] < blocks))


@triton.jit
def dsa_tokens(lens_ptr, out_table_ptr, table_ptr, table_rows, table_cols, b, fetch, start, q, kv, j0, blocks,
               n_rows, DCP_SIZE: tl.constexpr, DCP_RANK: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr,
               ONE_STEP: tl.constexpr):
    """Tokens j0 + [0, BLOCK_W) of the requests `b` (those below their q): the rank's share of the causal
    length in row start + j, and the request's block row copied into it: in one tile when ONE_STEP (NB <=
    BLOCK_C; a column loop of one step cost a B = 1 launch about 0.07 us on an H100), else BLOCK_C columns at
    a time."""
    j = j0 + tl.arange(0, BLOCK_W)
    row = start[:, None] + j[None, :]
    live = (j[None, :] < q[:, None]) & (row < n_rows)
    reach = kv[:, None] - q[:, None] + j[None, :] + DCP_SIZE - DCP_RANK
    tl.store(lens_ptr + row, tl.where(reach > 0, reach // DCP_SIZE, 0).to(tl.int32), mask=live)
    if ONE_STEP:
        dsa_columns(out_table_ptr, table_ptr, table_rows, table_cols, b, fetch, row, live, 0, blocks, BLOCK_C)
    else:
        for c0 in range(0, blocks, BLOCK_C):
            dsa_columns(out_table_ptr, table_ptr, table_rows, table_cols, b, fetch, row, live, c0, blocks, BLOCK_C)


@launcher
@triton.jit
def dsa_kernel(q_ptr, q_stride, kv_ptr, kv_stride, cu_ptr, cu_stride, table_ptr, table_rows, table_cols,
               lens_ptr, out_table_ptr, batch, blocks, n_rows, DCP_SIZE: tl.constexpr, DCP_RANK: tl.constexpr,
               BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr, ONE_STEP: tl.constexpr):
    """Program p: requests [p * BLOCK_R, (p + 1) * BLOCK_R), with their tokens as [BLOCK_R, BLOCK_W,
    BLOCK_C] tiles: one round of independent loads (q, kv, cu_q, the block rows), then the stores; a
    loop only for queries longer than BLOCK_W. dcp_size and dcp_rank are compile-time constants (one build
    per pair, as the engines specialize), so the division by dcp_size is a constant one."""
    b = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    real = b < batch
    at = b.to(tl.int64)
    q = tl.load(q_ptr + at * q_stride, mask=real, other=0).to(tl.int64)
    kv = tl.load(kv_ptr + at * kv_stride, mask=real, other=0).to(tl.int64)
    start = tl.load(cu_ptr + at * cu_stride, mask=real, other=0).to(tl.int64)
    dsa_tokens(lens_ptr, out_table_ptr, table_ptr, table_rows, table_cols, b, real, start, q, kv, 0, blocks,
               n_rows, DCP_SIZE, DCP_RANK, BLOCK_W, BLOCK_C, ONE_STEP)     # block rows read with q, not after it
    for j0 in range(BLOCK_W, tl.max(q, 0), BLOCK_W):  # queries longer than BLOCK_W only
        dsa_tokens(lens_ptr, out_table_ptr, table_ptr, table_rows, table_cols, b, q > j0, start, q, kv, j0,
                   blocks, n_rows, DCP_SIZE, DCP_RANK, BLOCK_W, BLOCK_C, ONE_STEP)


def dsa_tile(batch: int, blocks: int, n_rows: int) -> tuple[int, int]:
    """(columns, tokens) of a dsa program's [tokens, columns] tile per request: every block column up to
    1024, and N / B tokens rounded up to a power of two, within DSA_TILE entries and WIDTH tokens."""
    columns = lanes(blocks, 1024)
    return columns, lanes(cdiv(n_rows, batch), min(WIDTH, max(DSA_TILE // columns, 1)))


@prepared
def dsa_indexer_metadata(*, q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size, dcp_rank, indexer_kv_lens,
                         expanded_block_table):
    """See `specverify.oracles.graph.dsa_indexer_metadata`. One launch over the requests; the token
    tile's width is N / B rounded up (the mean query length when N is exact); on CUDA one request per program
    up to DSA_ONE_REQUEST requests, more per program beyond."""
    batch, blocks = validate(oracle.check_dsa_indexer_metadata, q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size,
                             dcp_rank, indexer_kv_lens, expanded_block_table, values=reads_values(q_seqlens))
    if batch == 0 or N == 0:
        return
    columns, span = dsa_tile(batch, blocks, N)
    alone = batch <= (DSA_ONE_REQUEST if q_seqlens.is_cuda else 1)
    rows = 1 if alone else min(lanes(batch, REQUESTS), max(DSA_TILE // (span * columns), 1))
    dsa_kernel[(cdiv(batch, rows),)](
        q_seqlens, q_seqlens.stride(0), kv_seqlens, kv_seqlens.stride(0), cu_q, cu_q.stride(0), block_offsets,
        block_offsets.stride(0), block_offsets.stride(1), indexer_kv_lens, expanded_block_table, batch, blocks, N,
        DCP_SIZE=int(dcp_size), DCP_RANK=int(dcp_rank), BLOCK_R=rows, BLOCK_W=span, BLOCK_C=columns,
        ONE_STEP=blocks <= columns)
