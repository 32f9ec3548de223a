"""Torch kernels of the `graph` family: vectorized, a handful of launches, no host sync on CUDA outside
checked mode (every size comes from a shape; token-to-request maps use `output_size`/`searchsorted`)."""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.kernels.torch.layout import masked_store
from specverify.oracles import graph as oracle


def fill_common_inputs(*, input_ids, position_ids, block_offsets, q_start_loc, q_seqlens, kv_seqlens, pad_ids,
                       pad_query_len, graph_input_ids, graph_position_ids, graph_block_offsets, graph_qkv_lens,
                       graph_cu_seqlens):
    """See `specverify.oracles.graph.fill_common_inputs`. Inputs may have any strides."""
    batch, blocks, tokens = oracle.check_fill_common_inputs(
        input_ids, position_ids, block_offsets, q_start_loc, q_seqlens, kv_seqlens, pad_ids, pad_query_len,
        graph_input_ids, graph_position_ids, graph_block_offsets, graph_qkv_lens, graph_cu_seqlens,
        values=reads_values(input_ids))
    graph_input_ids[:tokens] = input_ids
    graph_input_ids[tokens:] = pad_ids[tokens:]
    graph_position_ids[:tokens] = position_ids
    graph_block_offsets.zero_()
    graph_block_offsets[:batch, :blocks] = block_offsets
    graph_qkv_lens[0, batch:] = 0
    graph_qkv_lens[1:, batch:] = pad_query_len
    graph_qkv_lens[:, :batch] = torch.stack((q_start_loc.long(), q_seqlens.long(), kv_seqlens.long()))
    graph_cu_seqlens[:, 0] = 0
    graph_cu_seqlens[:, 1:] = torch.cumsum(graph_qkv_lens[1:], dim=1)


def step_context(*, q_seqlens, history_lengths, num_ignored_history, uniform_layout, q_start_loc, kv_seqlens,
                 position_ids, cu_seqlens):
    """See `specverify.oracles.graph.step_context`. The uniform path reads the query length from the
    shapes (N // B) and never reads q_seqlens; the general path maps tokens to requests."""
    batch, tokens = oracle.check_step_context(q_seqlens, history_lengths, num_ignored_history, uniform_layout,
                                              q_start_loc, kv_seqlens, position_ids, cu_seqlens,
                                              values=reads_values(q_seqlens))
    cu_seqlens[:, 0] = 0
    if batch == 0:
        return
    device = q_seqlens.device
    history = history_lengths.long()
    requests = torch.arange(batch, device=device)
    if uniform_layout:
        width = tokens // batch
        q = torch.full((batch,), width, device=device, dtype=torch.long)
        starts = requests * width
        positions = (history[:, None] + torch.arange(width, device=device)).reshape(-1)
    else:
        q = q_seqlens.long()
        starts = torch.cumsum(q, 0) - q
        owner = torch.repeat_interleave(requests, q, output_size=tokens)
        positions = history[owner] + torch.arange(tokens, device=device) - starts[owner]
    kv = q + history - num_ignored_history.long()
    q_start_loc.copy_(starts)
    kv_seqlens.copy_(kv)
    position_ids.copy_(positions)
    cu_seqlens[:, 1:] = torch.cumsum(torch.stack((q, kv)), dim=1)


def dsa_indexer_metadata(*, q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size, dcp_rank, indexer_kv_lens,
                         expanded_block_table):
    """See `specverify.oracles.graph.dsa_indexer_metadata`. Works over all N rows and stores only those
    of the queries' tokens (a sync-free masked store)."""
    batch, blocks = oracle.check_dsa_indexer_metadata(q_seqlens, kv_seqlens, cu_q, block_offsets, N, dcp_size,
                                                      dcp_rank, indexer_kv_lens, expanded_block_table,
                                                      values=reads_values(q_seqlens))
    if batch == 0 or N == 0:
        return
    offsets = cu_q.long().contiguous()
    rows = torch.arange(N, device=offsets.device)
    owner = torch.searchsorted(offsets[1:], rows, right=True).clamp(max=batch - 1)
    live = rows < offsets[-1]
    j = rows - offsets[owner]
    visible = kv_seqlens.long()[owner] - q_seqlens.long()[owner] + j + 1
    lengths = torch.div(visible + dcp_size - 1 - dcp_rank, dcp_size, rounding_mode="floor").clamp(min=0)
    masked_store(indexer_kv_lens, live, lengths)
    if blocks:
        masked_store(expanded_block_table, live[:, None].expand(N, blocks), block_offsets[owner])
