"""Torch kernels of the `tree` family: vectorised over requests and nodes, no host sync outside checked
mode (the loop counts come from N, a host scalar).

Depth and ancestors by pointer doubling: after r rounds of `set |= set[up]; up = up[up]` every node
holds its ancestors up to 2**r - 1 levels above it, so ceil(log2 N) rounds cover any tree of N nodes.
Every offset is int64 (FULL_MASK rows pass 2**31 elements once sum(seq)*N + B*N*N does).
"""
from __future__ import annotations

import torch

from specverify.kernels.validation import reads_values
from specverify.kernels.torch.layout import iota, iota_value, scalar
from specverify.oracles import tree as oracle


def rounds(nodes: int) -> int:
    """Pointer-doubling rounds that reach every ancestor in a tree of `nodes` nodes."""
    return max(nodes - 1, 0).bit_length()


def build_parents(parent_list, selected_index, topk: int, nodes: int) -> torch.Tensor:
    """[B, N] parent of every node (-1 for the root). Rows of selected_index ascend, so the node whose
    entry is a beam is found by binary search."""
    batch = selected_index.shape[0]
    group = torch.div(selected_index, topk, rounding_mode="floor")
    parents = torch.zeros((batch, nodes), dtype=torch.long, device=selected_index.device)
    parents[:, 0] = -1
    if nodes > 1 and parent_list.shape[1] > 1:
        beam = parent_list.gather(1, group.clamp(max=parent_list.shape[1] - 1))
        found = torch.searchsorted(selected_index.contiguous(), beam.contiguous())
        parents[:, 1:] = torch.where(group == 0, scalar(0, found), found + 1)
    return parents


def links(parents: torch.Tensor, retrieve_next_token, retrieve_next_sibling) -> None:
    """First child and next higher-numbered sibling from [B, N] parents, every element written."""
    batch, nodes = parents.shape
    node = iota(nodes, parents).expand(batch, nodes)
    first = torch.full((batch, nodes + 1), nodes, dtype=torch.long, device=parents.device)
    first.scatter_reduce_(1, torch.where(parents < 0, iota_value(nodes, parents), parents), node, reduce="amin")
    retrieve_next_token.copy_(torch.where(first[:, :nodes] == nodes, scalar(-1, first), first[:, :nodes]))
    # siblings: nodes sorted by (parent, number); each one's successor in that order, if it shares the parent
    key = torch.where(parents < 0, nodes * nodes, parents * nodes + node)
    order = key.argsort(dim=1)
    sorted_parents = parents.gather(1, order)
    following = torch.full_like(order, -1)
    same = sorted_parents[:, 1:] == sorted_parents[:, :-1]
    following[:, :-1] = torch.where(same & (sorted_parents[:, :-1] >= 0), order[:, 1:], scalar(-1, order))
    retrieve_next_sibling.scatter_(1, order, following)


def ancestors(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, N, N] bool: row i marks i and its ancestors, [B, N] depth) by pointer doubling."""
    batch, nodes = parents.shape
    up = parents.clamp(min=0)
    marks = torch.eye(nodes, dtype=torch.bool, device=parents.device).expand(batch, nodes, nodes).clone()
    for _ in range(rounds(nodes)):
        marks |= marks.gather(1, up[:, :, None].expand(batch, nodes, nodes))
        up = up.gather(1, up)
    return marks, marks.sum(dim=2) - 1


def full_mask_rows(verified_seq_len: torch.Tensor, nodes: int) -> torch.Tensor:
    """[B, N] int64 element offset of each row's tree block in a FULL_MASK:
    N*N*b + N*sum(seq[:b]) + (seq[b]+N)*i + seq[b]."""
    seq = verified_seq_len.long()
    batch = seq.shape[0]
    before = torch.cumsum(seq, 0) - seq
    request = iota(batch, seq) * (nodes * nodes) + before * nodes + seq
    return request[:, None] + (seq[:, None] + nodes) * iota(nodes, seq)[None, :]


def write_mask(marks: torch.Tensor, verified_seq_len, mode: int, tree_mask) -> None:
    batch, nodes, _ = marks.shape
    if mode == oracle.QLEN_ONLY:
        tree_mask[:batch * nodes * nodes].copy_(marks.reshape(-1))
    elif mode == oracle.FULL_MASK:
        where = full_mask_rows(verified_seq_len, nodes)[:, :, None] + iota(nodes, marks)
        tree_mask[where.reshape(-1)] = marks.reshape(-1)
    else:
        width = oracle.row_bytes(nodes)
        bits = (marks.long() << iota(nodes, marks)).sum(dim=2)
        shift = iota(width, marks) * 8
        row = (bits[:, :, None] >> shift) & 0xFF
        tree_mask[:batch * nodes * width].copy_(row.reshape(-1).to(torch.uint8))


def build(*, parent_list, selected_index, verified_seq_len, topk, depth, N, tree_mask_mode, tree_mask,
          positions, retrieve_index, retrieve_next_token, retrieve_next_sibling):
    """See `specverify.oracles.tree.build`."""
    oracle.check_build(parent_list, selected_index, verified_seq_len, topk, depth, N, tree_mask_mode, tree_mask,
                       positions, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                       values=reads_values(verified_seq_len))
    batch = verified_seq_len.shape[0]
    if batch == 0:
        return
    parents = build_parents(parent_list, selected_index, topk, N)
    marks, levels = ancestors(parents)
    positions.copy_((verified_seq_len[:, None] + levels).reshape(-1))
    retrieve_index.copy_(iota(batch * N, parents).view(batch, N))
    links(parents, retrieve_next_token, retrieve_next_sibling)
    write_mask(marks, verified_seq_len, tree_mask_mode, tree_mask)


def reconstruct_from_mask(*, tree_mask, verified_seq_len, N, positions, retrieve_index, retrieve_next_token,
                          retrieve_next_sibling):
    """See `specverify.oracles.tree.reconstruct_from_mask`."""
    batch = oracle.check_reconstruct(tree_mask, verified_seq_len, N, positions, retrieve_index,
                                     retrieve_next_token, retrieve_next_sibling, values=reads_values(verified_seq_len))
    if batch == 0:
        return
    node = iota(N, verified_seq_len)
    below = node[None, :] < node[:, None]                  # [i, j]: j < i
    mask = tree_mask[:batch * N * N].view(batch, N, N) & below
    positions.copy_((verified_seq_len[:, None] + mask.sum(dim=2)).reshape(-1))
    retrieve_index.copy_(iota(batch * N, verified_seq_len).view(batch, N))
    parents = torch.where(mask, node, scalar(-1, node)).amax(dim=2)
    # next_token[i]: the lowest k with mask[k, i] (k > i by `below`)
    lowest = torch.where(mask, node[None, :, None], iota_value(N, node)).amin(dim=1)
    retrieve_next_token.copy_(torch.where(lowest == N, scalar(-1, lowest), lowest))
    # next_sibling[i]: the lowest k > i with parent(k) == parent(i) >= 0
    same = (parents[:, None, :] == parents[:, :, None]) & (parents[:, :, None] >= 0) & below.T
    sibling = torch.where(same, node, iota_value(N, node)).amin(dim=2)
    retrieve_next_sibling.copy_(torch.where(sibling == N, scalar(-1, sibling), sibling))


def pack_mask(*, mask, kv_indptr, packed_indptr, Q, max_kv_len, packed):
    """See `specverify.oracles.tree.pack_mask`. A grid of B x ceil(Q*max_kv_len/8) bytes, as the engines
    launch; the bytes past a segment's end add 0 to some byte (an index_add of new - old writes only the
    segments' bytes, whatever their count, without a host sync)."""
    batch = oracle.check_pack(mask, kv_indptr, packed_indptr, Q, max_kv_len, packed, values=reads_values(kv_indptr))
    width = -(-Q * max_kv_len // 8)
    if batch == 0 or width == 0 or packed.shape[0] == 0:
        return
    kv = kv_indptr.long()
    count = (kv[1:] - kv[:-1]) * Q
    byte = iota(width, kv)
    bit = (byte[:, None] * 8 + iota(8, kv))[None]                         # [1, width, 8]
    live = bit < count[:, None, None]
    source = (kv[:-1, None, None] * Q + bit).clamp(max=max(mask.shape[0] - 1, 0))
    bits = mask[source] & live if mask.shape[0] else torch.zeros_like(live)
    new = (bits.long() << iota(8, kv)).sum(dim=2).to(torch.uint8)
    where = (packed_indptr.long()[:-1, None] + byte).clamp(max=packed.shape[0] - 1)
    written = byte[None, :] * 8 < count[:, None]
    old = packed[where]
    packed.index_add_(0, where.reshape(-1), (new - old).mul_(written).reshape(-1))   # bytes wrap; 0 unwritten
