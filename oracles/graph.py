"""Oracles of the `graph` family: per-step attention metadata and the input buffers of a captured CUDA graph.

Loop-level and obviously correct; destination passing; invalid input is refused with an error naming
the field. The `check_*` functions are shared with the production kernels (`values=False` skips the
checks that read array contents, so a CUDA kernel never waits for the device).

Choices where STAGES.md is silent (every backend follows them):
- fill_common_inputs: the capacities are the graph buffers' own shapes (MB = rows of
  `graph_block_offsets`, MNB = its columns, MT = length of `graph_input_ids`), as an engine allocates
  them once at capture; B, NB and N are the shapes of `block_offsets` and `input_ids`. A batch, a
  block row or a token count beyond its capacity is refused (naming `block_offsets` or `input_ids`),
  never cut. PAD is `pad_query_len` for both the q and the kv row of a padding request (a request
  whose whole context is its own query); its q_start_loc is 0. The length rows may be int32 or int64
  each; the graph keeps them in int32, so every value, and every running sum over all MB rows
  (padding included), must fit int32. `q_start_loc` must be the exclusive running sum of `q_seqlens`
  and the queries must cover `input_ids` exactly. Block ids must lie in [0, 2**31 - 1].
- step_context: the three inputs share one index dtype (int32 or int64), which `q_start_loc` and
  `kv_seqlens` keep; `position_ids` is int64 and exactly sum(q) long. `uniform_layout=True` promises
  that every query has the same length (so N // B, read from the shapes, is that length): an input
  that breaks the promise is refused where values are checked. q may be 0; 0 <= ignored <= history.
- dsa_indexer_metadata: `N` is the length of the output buffers (a capture size); the queries' tokens
  must fit in it. `cu_q` must be the exclusive running sum of `q_seqlens`. `kv_seqlens < q_seqlens`
  is the hazard tier: the tokens whose causal prefix is empty get length 0.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles.arguments import (dtype_name, need_at_least, need_at_most, need_dtype, need_int,
                                       need_ndim)

INDEX = ("int32", "int64")
INT32_MAX = 2**31 - 1


def need_dims(name: str, a, shape: tuple[int, ...], source: str = "") -> None:
    """`a` has exactly `shape`; `source` names where the sizes come from, so an error raised while
    checking one of two disagreeing fields names the other too."""
    if tuple(a.shape) != tuple(shape):
        where = f" ({source})" if source else ""
        raise ValueError(f"{name}: shape must be {list(shape)}{where}, got {list(a.shape)}")


def need_vector(name: str, a, length: int, *dtypes: str, source: str = "") -> None:
    need_dtype(name, a, *dtypes)
    need_dims(name, a, (length,), source)


def wide(a):
    """An index array widened to int64 (NumPy or torch), so differences and sums cannot wrap."""
    return a.long() if hasattr(a, "long") else a.astype(np.int64)


def total(a) -> int:
    return int(wide(a).sum()) if len(a) else 0


def need_running_offsets(name: str, offsets, lengths, what: str) -> None:
    """offsets[0] == 0 and offsets[b + 1] == offsets[b] + lengths[b] for every b the offsets cover."""
    count = min(len(offsets), len(lengths) + 1)
    if count == 0:
        return
    if int(offsets[0]) != 0:
        raise ValueError(f"{name}: must start at 0 (exclusive running sum of {what}), got {int(offsets[0])}")
    step = wide(offsets[1:count]) - wide(offsets[:count - 1])
    if len(step) and bool((step != wide(lengths[:count - 1])).any()):
        raise ValueError(f"{name}: must be the exclusive running sum of {what}")


def need_block_ids(name: str, table) -> None:
    need_at_least(name, table, 0)
    need_at_most(name, table, INT32_MAX, "block ids fit the int32 graph tables")


# ---------------------------------------------------------------- graph.fill_common_inputs

def check_fill_common_inputs(input_ids, position_ids, block_offsets, q_start_loc, q_seqlens, kv_seqlens,
                             pad_ids, pad_query_len, graph_input_ids, graph_position_ids, graph_block_offsets,
                             graph_qkv_lens, graph_cu_seqlens, values=True) -> tuple[int, int, int]:
    """Returns (B, NB, N)."""
    need_dtype("graph_block_offsets", graph_block_offsets, "int32")
    need_ndim("graph_block_offsets", graph_block_offsets, 2)
    max_batch, max_blocks = graph_block_offsets.shape
    mb = "MB = graph_block_offsets.shape[0]"
    need_dtype("graph_input_ids", graph_input_ids, "int64")
    need_ndim("graph_input_ids", graph_input_ids, 1)
    max_tokens, mt = len(graph_input_ids), "MT = len(graph_input_ids)"
    need_vector("graph_position_ids", graph_position_ids, max_tokens, "int64", source=mt)
    need_dtype("graph_qkv_lens", graph_qkv_lens, "int32")
    need_dims("graph_qkv_lens", graph_qkv_lens, (3, max_batch), mb)
    need_dtype("graph_cu_seqlens", graph_cu_seqlens, "int32")
    need_dims("graph_cu_seqlens", graph_cu_seqlens, (2, max_batch + 1), mb)
    need_vector("pad_ids", pad_ids, max_tokens, "int64", source=mt)
    need_dtype("input_ids", input_ids, "int64")
    need_ndim("input_ids", input_ids, 1)
    tokens = len(input_ids)
    if tokens > max_tokens:
        raise ValueError(f"input_ids: N = {tokens} tokens exceed the graph's capacity {mt} = {max_tokens}")
    need_vector("position_ids", position_ids, tokens, "int64", source="N = len(input_ids)")
    need_dtype("block_offsets", block_offsets, *INDEX)
    need_ndim("block_offsets", block_offsets, 2)
    batch, blocks = block_offsets.shape
    if batch > max_batch:
        raise ValueError(f"block_offsets: B = {batch} requests exceed the graph's capacity {mb} = {max_batch}")
    if blocks > max_blocks:
        raise ValueError(f"block_offsets: NB = {blocks} blocks per request exceed the graph's capacity "
                         f"MNB = graph_block_offsets.shape[1] = {max_blocks}")
    for name, lengths in (("q_start_loc", q_start_loc), ("q_seqlens", q_seqlens), ("kv_seqlens", kv_seqlens)):
        need_vector(name, lengths, batch, *INDEX, source="B = block_offsets.shape[0]")
    need_int("pad_query_len", pad_query_len)
    padding = (max_batch - batch) * pad_query_len
    if pad_query_len > INT32_MAX or padding > INT32_MAX:
        raise ValueError(f"pad_query_len: {max_batch - batch} padding rows of {pad_query_len} overflow the "
                         "int32 length rows")
    if values:
        for name, lengths in (("q_seqlens", q_seqlens), ("kv_seqlens", kv_seqlens)):
            need_at_least(name, lengths, 0)
            if total(lengths) + padding > INT32_MAX:
                raise ValueError(f"{name}: its running sum with the padding rows overflows the int32 cu_seqlens")
        if total(q_seqlens) != tokens:
            raise ValueError(f"q_seqlens: the queries must cover the N = {tokens} tokens of input_ids, "
                             f"they sum to {total(q_seqlens)}")
        need_running_offsets("q_start_loc", q_start_loc, q_seqlens, "q_seqlens")
        need_block_ids("block_offsets", block_offsets)
    return batch, blocks, tokens


def fill_common_inputs(*, input_ids, position_ids, block_offsets, q_start_loc, q_seqlens, kv_seqlens, pad_ids,
                       pad_query_len, graph_input_ids, graph_position_ids, graph_block_offsets, graph_qkv_lens,
                       graph_cu_seqlens):
    """Copy a real batch into the captured graph's buffers. Token ids: the real ones, then the padding
    noise at the same index. Positions: the real ones only. Block table: the real rows' blocks, 0 in
    every other entry. Length rows: the real requests', then (0, PAD, PAD) per padding request.
    cu_seqlens: 0, then the running sums of the q and the kv row over every request, padding included."""
    batch, blocks, tokens = check_fill_common_inputs(
        input_ids, position_ids, block_offsets, q_start_loc, q_seqlens, kv_seqlens, pad_ids, pad_query_len,
        graph_input_ids, graph_position_ids, graph_block_offsets, graph_qkv_lens, graph_cu_seqlens)
    for t in range(len(graph_input_ids)):
        graph_input_ids[t] = input_ids[t] if t < tokens else pad_ids[t]
        if t < tokens:
            graph_position_ids[t] = position_ids[t]
    max_batch, max_blocks = graph_block_offsets.shape
    cu_q = cu_kv = 0
    graph_cu_seqlens[0, 0] = graph_cu_seqlens[1, 0] = 0
    for b in range(max_batch):
        graph_block_offsets[b, :] = 0
        if b < batch:
            graph_block_offsets[b, :blocks] = block_offsets[b, :]
        if b < batch:
            start, q, kv = int(q_start_loc[b]), int(q_seqlens[b]), int(kv_seqlens[b])
        else:
            start, q, kv = 0, pad_query_len, pad_query_len
        graph_qkv_lens[0, b], graph_qkv_lens[1, b], graph_qkv_lens[2, b] = start, q, kv
        cu_q, cu_kv = cu_q + q, cu_kv + kv
        graph_cu_seqlens[0, b + 1], graph_cu_seqlens[1, b + 1] = cu_q, cu_kv


# ---------------------------------------------------------------- graph.step_context

def check_step_context(q_seqlens, history_lengths, num_ignored_history, uniform_layout, q_start_loc, kv_seqlens,
                       position_ids, cu_seqlens, values=True) -> tuple[int, int]:
    """Returns (B, N)."""
    need_dtype("q_seqlens", q_seqlens, *INDEX)
    need_ndim("q_seqlens", q_seqlens, 1)
    batch, dtype, b = len(q_seqlens), dtype_name(q_seqlens), "B = len(q_seqlens)"
    for name, a in (("history_lengths", history_lengths), ("num_ignored_history", num_ignored_history),
                    ("q_start_loc", q_start_loc), ("kv_seqlens", kv_seqlens)):
        need_dtype(name, a, *INDEX)
        if dtype_name(a) != dtype:
            raise TypeError(f"{name}: dtype must be {dtype} (the dtype of q_seqlens), got {dtype_name(a)}")
        need_dims(name, a, (batch,), b)
    if not isinstance(uniform_layout, bool):
        raise TypeError(f"uniform_layout: must be a Python bool, got {type(uniform_layout).__name__}")
    need_dtype("position_ids", position_ids, "int64")
    need_ndim("position_ids", position_ids, 1)
    tokens = len(position_ids)
    need_dtype("cu_seqlens", cu_seqlens, "int32")
    need_dims("cu_seqlens", cu_seqlens, (2, batch + 1), b)
    if uniform_layout and (tokens % batch if batch else tokens):
        raise ValueError(f"uniform_layout: N = len(position_ids) = {tokens} tokens do not split into "
                         f"{batch} equal queries ({b})")
    if values:
        need_at_least("q_seqlens", q_seqlens, 0)
        need_at_least("history_lengths", history_lengths, 0)
        need_at_least("num_ignored_history", num_ignored_history, 0)
        if bool((wide(num_ignored_history) > wide(history_lengths)).any()):
            raise ValueError("num_ignored_history: must be <= history_lengths (only history can be ignored)")
        if total(q_seqlens) != tokens:
            raise ValueError(f"position_ids: length must be sum(q_seqlens) = {total(q_seqlens)}, got {tokens}")
        if total(q_seqlens) > INT32_MAX:
            raise ValueError("q_seqlens: the running sum overflows the int32 cu_seqlens")
        kv = wide(q_seqlens) + wide(history_lengths) - wide(num_ignored_history)
        if batch and int(kv.sum()) > INT32_MAX:
            raise ValueError("history_lengths: the running sum of kv_seqlens overflows the int32 cu_seqlens")
        if uniform_layout and batch and bool((q_seqlens != q_seqlens[0]).any()):
            raise ValueError("uniform_layout: promises equal query lengths, but q_seqlens differ")
    return batch, tokens


def step_context(*, q_seqlens, history_lengths, num_ignored_history, uniform_layout, q_start_loc, kv_seqlens,
                 position_ids, cu_seqlens):
    """Per request: where its query starts in the packed batch, its visible KV length (query plus
    history, less the history a sliding window ignores) and its tokens' positions (history + 0, 1, ...);
    cu_seqlens: 0, then the running sums of the query and the KV lengths. The layout flag only picks
    the kernel's path: the bytes are the same."""
    batch, _ = check_step_context(q_seqlens, history_lengths, num_ignored_history, uniform_layout, q_start_loc,
                                  kv_seqlens, position_ids, cu_seqlens)
    start = cu_kv = 0
    cu_seqlens[0, 0] = cu_seqlens[1, 0] = 0
    for b in range(batch):
        q, history = int(q_seqlens[b]), int(history_lengths[b])
        kv = q + history - int(num_ignored_history[b])
        q_start_loc[b], kv_seqlens[b] = start, kv
        for j in range(q):
            position_ids[start + j] = history + j
        start, cu_kv = start + q, cu_kv + kv
        cu_seqlens[0, b + 1], cu_seqlens[1, b + 1] = start, cu_kv


# ---------------------------------------------------------------- graph.dsa_indexer_metadata

def check_dsa_indexer_metadata(q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size, dcp_rank,
                               indexer_kv_lens, expanded_block_table, values=True) -> tuple[int, int]:
    """Returns (B, NB)."""
    need_dtype("q_seqlens", q_seqlens, *INDEX)
    need_ndim("q_seqlens", q_seqlens, 1)
    batch, b = len(q_seqlens), "B = len(q_seqlens)"
    need_vector("kv_seqlens", kv_seqlens, batch, *INDEX, source=b)
    need_vector("cu_q", cu_q, batch + 1, *INDEX, source=b)
    need_dtype("block_offsets", block_offsets, *INDEX)
    need_ndim("block_offsets", block_offsets, 2)
    if block_offsets.shape[0] != batch:
        raise ValueError(f"block_offsets: must have {b} = {batch} rows, got shape {list(block_offsets.shape)}")
    blocks = block_offsets.shape[1]
    need_int("N", N)
    need_int("dcp_size", dcp_size, 1)
    need_int("dcp_rank", dcp_rank)
    if dcp_rank >= dcp_size:
        raise ValueError(f"dcp_rank: must be < dcp_size = {dcp_size}, got {dcp_rank}")
    need_dtype("indexer_kv_lens", indexer_kv_lens, "int32")
    need_ndim("indexer_kv_lens", indexer_kv_lens, 1)
    if len(indexer_kv_lens) != N:
        raise ValueError(f"N: must equal the length of indexer_kv_lens ({len(indexer_kv_lens)}), got {N}")
    need_dtype("expanded_block_table", expanded_block_table, "int32")
    need_dims("expanded_block_table", expanded_block_table, (N, blocks), "N, NB = block_offsets.shape[1]")
    if values:
        need_at_least("q_seqlens", q_seqlens, 0)
        need_at_least("kv_seqlens", kv_seqlens, 0)
        need_at_most("kv_seqlens", kv_seqlens, INT32_MAX, "lengths fit the int32 indexer_kv_lens")
        need_running_offsets("cu_q", cu_q, q_seqlens, "q_seqlens")
        if int(cu_q[-1]) > N:
            raise ValueError(f"N: the queries hold {int(cu_q[-1])} tokens, more than N = {N}")
        need_block_ids("block_offsets", block_offsets)
    return batch, blocks


def dsa_indexer_metadata(*, q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size, dcp_rank, indexer_kv_lens,
                         expanded_block_table):
    """Per query token j of request b (row cu_q[b] + j): how many of its causally visible KV entries
    (kv - q + j + 1) this decode-context-parallel rank holds when entries are dealt round-robin over
    dcp_size ranks (never below 0), and request b's block row. Rows past the queries are untouched."""
    batch, _ = check_dsa_indexer_metadata(q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size, dcp_rank,
                                          indexer_kv_lens, expanded_block_table)
    for b in range(batch):
        q, kv = int(q_seqlens[b]), int(kv_seqlens[b])
        for j in range(q):
            row = int(cu_q[b]) + j
            visible = kv - q + j + 1
            indexer_kv_lens[row] = max((visible + dcp_size - 1 - dcp_rank) // dcp_size, 0)
            expanded_block_table[row, :] = block_offsets[b, :]
