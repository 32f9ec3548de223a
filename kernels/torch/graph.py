"""Torch kernels of the `graph` family: vectorized, a handful of launches, no host sync on CUDA outside
checked mode (every size comes from a shape; token-to-request maps use `output_size`/`searchsorted`)."""
from __future__ import annotations

import torch

from specverify.kernels.validation import reads_values
from specverify.kernels.torch.layout import constant, iota, low_bits
from specverify.oracles import graph as oracle


def fill_common_inputs(*, input_ids, position_ids, block_offsets, q_start_loc, q_seqlens, kv_seqlens, pad_ids,
                       pad_query_len, graph_input_ids, graph_position_ids, graph_block_offsets, graph_qkv_lens,
                       graph_cu_seqlens):
    """See `specverify.oracles.graph.fill_common_inputs`. Inputs may have any strides."""
    batch, blocks, tokens = oracle.check_fill_common_inputs(
        input_ids, position_ids, block_offsets, q_start_loc, q_seqlens, kv_seqlens, pad_ids, pad_query_len,
        graph_input_ids, graph_position_ids, graph_block_offsets, graph_qkv_lens, graph_cu_seqlens,
        values=reads_values(input_ids))
    torch.cat((input_ids, pad_ids[tokens:]), out=graph_input_ids)
    graph_position_ids[:tokens] = position_ids
    graph_block_offsets.zero_()
    graph_block_offsets[:batch, :blocks] = block_offsets
    for row, lengths in enumerate((q_start_loc, q_seqlens, kv_seqlens)):
        graph_qkv_lens[row, :batch] = lengths
    padding = constant("qkv_padding", graph_qkv_lens)
    torch.mul(padding.expand(3, graph_qkv_lens.shape[1] - batch), pad_query_len, out=graph_qkv_lens[:, batch:])
    sums = torch.cumsum(graph_qkv_lens[1:], dim=1, dtype=graph_cu_seqlens.dtype)
    zeros = constant(f"zero_column_{str(sums.dtype)[6:]}", sums)
    torch.cat((zeros, sums), dim=1, out=graph_cu_seqlens)   # one copy kernel, no fill


def step_context(*, q_seqlens, history_lengths, num_ignored_history, uniform_layout, q_start_loc, kv_seqlens,
                 position_ids, cu_seqlens):
    """See `specverify.oracles.graph.step_context`. The uniform path reads the query length from the
    shapes (N // B) and never reads q_seqlens; the general path maps tokens to requests. Both build the
    int32 rows [0, q...] and [0, kv...] as q + (h - ignored) * [0, 1] (one op; two when q is the Python
    N // B) and sum them in another."""
    batch, tokens = oracle.check_step_context(q_seqlens, history_lengths, num_ignored_history, uniform_layout,
                                              q_start_loc, kv_seqlens, position_ids, cu_seqlens,
                                              values=reads_values(q_seqlens))
    if batch == 0:
        cu_seqlens[:, 0] = 0
        return
    history = history_lengths
    width = tokens // batch
    lengths = torch.empty((2, batch + 1), device=history.device, dtype=cu_seqlens.dtype)
    lengths[:, 0] = 0
    second = constant("second_row", history)
    if uniform_layout:   # q = width, a Python scalar (a cached scalar would depend on the call)
        torch.mul(history - num_ignored_history, second, out=lengths[:, 1:]).add_(width)
    else:
        torch.addcmul(q_seqlens, history - num_ignored_history, second, out=lengths[:, 1:])
    kv_seqlens.copy_(lengths[1, 1:])
    torch.cumsum(lengths, dim=1, out=cu_seqlens)
    q_start_loc.copy_(cu_seqlens[0, :batch])
    if uniform_layout:
        torch.add(history[:, None], iota(width, history), out=position_ids.view(batch, width))
        return
    tokens_ = iota(tokens, history, cu_seqlens.dtype)
    owner = torch.searchsorted(cu_seqlens[0, 1:batch], tokens_, right=True)
    start = torch.empty(batch, device=history.device, dtype=torch.long)    # history - start in 64 bits: an
    torch.sub(history, q_start_loc, out=start)                             # int32 history + offset passes 2**31
    torch.add(tokens_, start[owner], out=position_ids)


def dsa_indexer_metadata(*, q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size, dcp_rank, indexer_kv_lens,
                         expanded_block_table):
    """See `specverify.oracles.graph.dsa_indexer_metadata`. Works over all N rows and writes back the old
    value in rows past the queries' tokens (where rows < cu_q[B]). Token row t of request b:
    visible = kv[b] - cu_q[b+1] + t + 1, so one gather of kv - cu_q[1:] per row."""
    batch, blocks = oracle.check_dsa_indexer_metadata(q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size,
                                                      dcp_rank, indexer_kv_lens, expanded_block_table,
                                                      values=reads_values(q_seqlens))
    if batch == 0 or N == 0:
        return
    rows = iota(N, cu_q, cu_q.dtype)
    owner = torch.searchsorted(cu_q[1:batch].contiguous(), rows, right=True)   # rows past the end: B - 1
    live = rows < cu_q[batch:]
    shift = dcp_size - dcp_rank                            # + 1, and + D - 1 - r before the division
    base = torch.sub(kv_seqlens, cu_q[1:], out=indexer_kv_lens.new_empty(batch))   # in its dtype
    visible = torch.add(base[owner], iota(N + shift, cu_q, base.dtype)[shift:])
    if dcp_size > 1:
        visible = torch.div(visible, dcp_size, rounding_mode="floor")
    torch.where(live, visible.clamp_(min=0), indexer_kv_lens, out=indexer_kv_lens)
    if blocks:
        table = low_bits(block_offsets[owner], torch.int32)   # the ids fit the output's int32 (its only dtype)
        torch.where(live[:, None], table, expanded_block_table, out=expanded_block_table)
