"""Torch kernels of the `tree` family: vectorised over requests and nodes, no Python loop over requests, no
host sync outside checked mode (the loop counts come from N, a host scalar).

`tree.build` and `tree.reconstruct_from_mask`: depth and ancestors by pointer doubling: after r rounds of
`set |= set[up]; up = up[up]` every node holds its ancestors up to 2**r - 1 levels above it, so
ceil(log2 N) rounds cover any tree of N nodes. Every offset is int64 (FULL_MASK rows pass 2**31 elements
once sum(seq)*N + B*N*N does).

Verification: every acceptance decision depends only on a node's parent and on the siblings listed before
it, never on the path taken to the parent, so each kernel decides for all nodes at once and then descends:
- `tree_order`: each node's parent and its position in its parent's child list, by pointer jumping
  along the sibling links (ceil(log2 N) rounds);
- per node, whether it may be taken (greedy: its token is the parent's prediction; sampling: the
  acceptance test with the running mass of its list, summed by pointer jumping too);
- `descend`: the path from the root through each node's first listed eligible child, found for all
  levels at once by pointer jumping up the parents (the longest-path dialect adds one round per level
  to mark the ancestors of the deepest matching nodes).
Rows that stop early repeat their last node, so every scatter writes equal values to a repeated index.
"""
from __future__ import annotations

import numpy as np
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


# ---------------------------------------------------------------- tree verification

def predecessors(links: torch.Tensor) -> torch.Tensor:
    """[B, N]: the node whose link (one of `links`, [B, N]) points at each node, else -1 (each node is
    the target of at most one link: the contract)."""
    batch, n = links.shape
    found = torch.full((batch, n + 1), -1, dtype=torch.long, device=links.device)
    found.scatter_(1, torch.where(links >= 0, links, iota_value(n, links)), iota(n, links).expand(batch, n))
    return found[:, :n]


def tree_order(next_token: torch.Tensor, next_sibling: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(parent, position): each node's parent (-1: in no child list) and its 0-based place in the list."""
    n = next_token.shape[1]
    by_child, by_sibling = predecessors(next_token), predecessors(next_sibling)
    head = torch.where(by_sibling >= 0, by_sibling, iota(n, next_token))
    position = (by_sibling >= 0).long()
    for _ in range(rounds(n)):
        position = position + position.gather(1, head)
        head = head.gather(1, head)
    return by_child.gather(1, head), position


def running_sum(values: torch.Tensor, next_sibling: torch.Tensor) -> torch.Tensor:
    """Per node: the sum of `values` over its list up to and including itself (pointer jumping)."""
    back = predecessors(next_sibling)
    total = values.clone()
    zero, none = scalar(0.0 if values.is_floating_point() else 0, values, values.dtype), scalar(-1, back)
    for _ in range(rounds(values.shape[1])):
        total = total + torch.where(back >= 0, total.gather(1, back.clamp(min=0)), zero)
        back = torch.where(back >= 0, back.gather(1, back.clamp(min=0)), none)
    return total


def descend(eligible: torch.Tensor, parent: torch.Tensor, position: torch.Tensor, levels: int):
    """(path [B, levels + 1] of nodes, n [B]): from the root, `levels` times the eligible child of the
    current node listed first; a row with none stays where it is. No loop over levels: each node's
    pick among its children is path-independent, so a node is on the path iff it and each of its
    ancestors below the root is its parent's pick (pointer jumping up the parents)."""
    batch, n = eligible.shape
    node = iota(n, parent)
    code = torch.where(eligible, position * n + node, n * n)       # the lowest code: the first listed child
    first = torch.full((batch, n + 1), n * n, dtype=torch.long, device=parent.device)
    first.scatter_reduce_(1, torch.where(eligible, parent, iota_value(n, parent)), code, "amin")
    first = first[:, :n] % n
    above = torch.where(node == 0, scalar(-1, parent), parent)     # the root heads its tree, whatever links to it
    picked = (above >= 0) & eligible & (first.gather(1, above.clamp(min=0)) == node)
    up, depth = topmost(above)
    on = (up == 0) & chain_and(picked, above) & (depth <= levels)
    count = torch.where(on, depth, scalar(0, depth)).amax(1)
    path = torch.zeros((batch, levels + 2), dtype=torch.long, device=parent.device)
    path.scatter_(1, torch.where(on, depth, iota_value(levels + 1, depth)), node.expand(batch, n))
    last = torch.minimum(iota(levels + 1, count)[None, :], count[:, None])
    return path[:, :levels + 1].gather(1, last), count


def topmost(above: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(top, depth): each node's topmost ancestor along `above` (-1: none) and its distance to it."""
    n = above.shape[1]
    up = torch.where(above >= 0, above, iota(n, above))
    depth = (above >= 0).long()
    for _ in range(rounds(n)):
        depth = depth + depth.gather(1, up)
        up = up.gather(1, up)
    return up, depth


def chain_and(flag: torch.Tensor, above: torch.Tensor) -> torch.Tensor:
    """Per node: `flag` holds for it and every ancestor that has a parent along `above`."""
    n = above.shape[1]
    up = torch.where(above >= 0, above, iota(n, above))
    whole = flag | (above < 0)
    for _ in range(rounds(n)):
        whole = whole & whole.gather(1, up)
        up = up.gather(1, up)
    return whole


def write_path(path, count, retrieve_index, emitted, predicts, accept_index, accept_token_num) -> None:
    """The path's slots into accept_index[b, 0..n] (later columns keep their values), the emitted token
    of each path node at its slot in `predicts`, and n."""
    slots = retrieve_index.gather(1, path)
    width = path.shape[1]
    columns = accept_index[:, :width]
    keep = iota(width, count)[None, :] > count[:, None]
    columns.copy_(torch.where(keep, columns, slots.to(torch.int32)))
    predicts.scatter_(0, slots.reshape(-1), emitted.reshape(-1).to(torch.int32))
    accept_token_num.copy_(count)


def verify(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict, predicts,
           accept_index, accept_token_num, longest: bool) -> None:
    batch, n, spec = oracle.check_verify_greedy(candidates, retrieve_index, retrieve_next_token,
                                                retrieve_next_sibling, target_predict, predicts, accept_index,
                                                accept_token_num, values=reads_values(retrieve_index))
    if batch == 0:
        return
    levels = min(spec - 1, n - 1)
    tp = target_predict.reshape(-1)
    want = tp[retrieve_index]                     # the prediction at each node
    parent, position = tree_order(retrieve_next_token, retrieve_next_sibling)
    match = (parent >= 0) & (candidates == want.gather(1, parent.clamp(min=0)))
    if longest:
        match = match & deepest_marks(match, parent, levels)
    path, count = descend(match, parent, position, levels)
    write_path(path, count, retrieve_index, want.gather(1, path), predicts, accept_index, accept_token_num)


def deepest_marks(match, parent, levels: int) -> torch.Tensor:
    """Nodes on some matching root path that ends at the deepest reachable depth (capped at `levels`)."""
    batch, n = match.shape
    above = torch.where(iota(n, parent) == 0, scalar(-1, parent), parent)    # the root heads its tree, whatever links to it
    up, depth = topmost(above)
    reached = (up == 0) & chain_and(match, above) & (depth <= levels)
    deepest = torch.where(reached, depth, scalar(-1, depth)).amax(1, keepdim=True)
    marks = reached & (depth == deepest)
    into = torch.where(above >= 0, above, iota_value(n, above))
    for _ in range(levels):   # up one level per round: ancestors of a deepest node
        found = torch.zeros((batch, n + 1), dtype=torch.long, device=match.device)
        found.scatter_reduce_(1, into, marks.long(), "amax")
        marks = marks | (found[:, :n] > 0)
    return marks


def verify_greedy(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                  predicts, accept_index, accept_token_num):
    """See `specverify.oracles.tree.verify_greedy`."""
    verify(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict, predicts,
           accept_index, accept_token_num, longest=False)


def verify_longest_path(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                        predicts, accept_index, accept_token_num):
    """See `specverify.oracles.tree.verify_longest_path`."""
    verify(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict, predicts,
           accept_index, accept_token_num, longest=True)


def sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           rule: str) -> None:
    batch, n, spec, vocab = oracle.check_sample_target_only(
        candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
        target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
        values=reads_values(retrieve_index))
    if batch == 0:
        return
    rows = iota(batch, candidates)[:, None]
    parent, position = tree_order(retrieve_next_token, retrieve_next_sibling)
    token = (candidates >= 0) & (candidates < vocab) & (parent >= 0)
    above = parent.clamp(min=0)
    p = torch.where(token, target_probs[rows, above, candidates.clamp(0, vocab - 1)],
                    scalar(0.0, target_probs, target_probs.dtype))
    mass = running_sum(p, retrieve_next_sibling)
    # thresholds rounded to f32 on the host; the divisor a 0-dim device tensor filled per call (a host tensor
    # is a copy that synchronizes; a Python scalar makes CUDA multiply by its reciprocal, not divide)
    acc = torch.full((), float(max(np.float32(threshold_acc), np.float32(oracle.THR_FLOOR))), device=p.device)
    single = float(np.float32(threshold_single))
    share = mass / acc
    coin = uniform_samples.gather(1, above)
    if rule == "le":
        accept = token & ((coin <= share) | (p >= single))
    else:
        accept = token & (p > 0) & ((coin < share) | (p >= single))
    levels = spec - 1
    path, count = descend(accept, parent, position, levels)
    # rejected siblings: listed before the first accepted child of a walked path node (all, if none)
    first = torch.full((batch, n + 1), n, dtype=torch.long, device=p.device)
    beyond = iota_value(n, parent)
    first.scatter_reduce_(1, torch.where(accept, parent, beyond), torch.where(accept, position, beyond), "amin")
    depth = iota(levels + 1, count)[None, :]
    walked = (depth <= count[:, None]) & (depth < levels)
    level_of = torch.full((batch, n + 1), -1, dtype=torch.long, device=p.device)
    level_of.scatter_(1, torch.where(walked, path, beyond), depth.expand(batch, -1).contiguous())
    level = torch.where(parent >= 0, level_of.gather(1, above), scalar(-1, level_of))
    rejected = token & (level >= 0) & (position < first.gather(1, above))
    cells = torch.where(rejected, level * (vocab + 1) + candidates.clamp(0, vocab - 1), (levels + 1) * (vocab + 1))
    values = torch.zeros((batch, (levels + 1) * (vocab + 1) + 1), dtype=torch.float32, device=p.device)
    written = torch.zeros(values.shape, dtype=torch.bool, device=p.device)
    values.scatter_(1, cells, p)
    written.scatter_(1, cells, rejected)
    shape = (batch, levels + 1, vocab + 1)
    values, written = values[:, :-1].view(shape)[..., :vocab], written[:, :-1].view(shape)[..., :vocab]
    old = draft_probs[rows, path]                                  # [B, levels + 1, V]
    new = torch.where(written, values, old)
    last = torch.minimum(iota(levels + 1, count)[None, :], count[:, None])
    new = new.gather(1, last[:, :, None].expand(-1, -1, vocab))    # stopped rows repeat their last row
    draft_probs[rows, path] = new
    target_row = target_probs[rows[:, 0], path.gather(1, count[:, None])[:, 0]]
    residual = torch.where((count == levels)[:, None], target_row,
                           (target_row - new.gather(1, count[:, None, None].expand(-1, 1, vocab))[:, 0]).clamp(min=0))
    picked = pick(residual, uniform_final)
    following = torch.cat([candidates.gather(1, path[:, 1:]), picked[:, None]], 1)
    emitted = torch.where(depth < count[:, None], following, picked[:, None])
    write_path(path, count, retrieve_index, emitted, predicts, accept_index, accept_token_num)


def pick(residual: torch.Tensor, uniform_final: torch.Tensor) -> torch.Tensor:
    """[B]: the inverse-CDF pick of each residual row (see `specverify.oracles.tree.pick`)."""
    vocab = residual.shape[1]
    threshold = uniform_final * residual.sum(1)
    positive = residual > 0
    passes = positive & (torch.cumsum(residual, 1) > threshold[:, None])
    last_positive = vocab - 1 - positive.flip(1).int().argmax(1)
    return torch.where(passes.any(1), passes.int().argmax(1),
                       torch.where(positive.any(1), last_positive, vocab - 1))


def sample_target_only(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples,
                       uniform_final, target_probs, draft_probs, threshold_single, threshold_acc, predicts,
                       accept_index, accept_token_num):
    """See `specverify.oracles.tree.sample_target_only`."""
    sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           rule="lt")


def sample_target_only_le(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                          uniform_samples, uniform_final, target_probs, draft_probs, threshold_single, threshold_acc,
                          predicts, accept_index, accept_token_num):
    """Dialect `le`: see `specverify.oracles.tree.sample_target_only_le`."""
    sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           rule="le")
