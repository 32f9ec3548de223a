"""Torch kernels of tree verification: no Python loop over requests, no host sync on CUDA outside
checked mode.

Every acceptance decision depends only on a node's parent and on the siblings listed before it, never on
the path taken to the parent, so each kernel decides for all nodes at once and then descends:
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
from specverify.oracles import tree_verify as oracle


def rounds(n: int) -> int:
    """Pointer-jumping rounds that cover a chain of n nodes."""
    return max(0, (n - 1).bit_length())


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
    up, depth = ancestors(above)
    on = (up == 0) & chain_and(picked, above) & (depth <= levels)
    count = torch.where(on, depth, scalar(0, depth)).amax(1)
    path = torch.zeros((batch, levels + 2), dtype=torch.long, device=parent.device)
    path.scatter_(1, torch.where(on, depth, iota_value(levels + 1, depth)), node.expand(batch, n))
    last = torch.minimum(iota(levels + 1, count)[None, :], count[:, None])
    return path[:, :levels + 1].gather(1, last), count


def ancestors(above: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
    up, depth = ancestors(above)
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
    """See `specverify.oracles.tree_verify.verify_greedy`."""
    verify(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict, predicts,
           accept_index, accept_token_num, longest=False)


def verify_longest_path(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                        predicts, accept_index, accept_token_num):
    """See `specverify.oracles.tree_verify.verify_longest_path`."""
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
    """[B]: the inverse-CDF pick of each residual row (see `specverify.oracles.tree_verify.pick`)."""
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
    """See `specverify.oracles.tree_verify.sample_target_only`."""
    sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           rule="lt")


def sample_target_only_le(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                          uniform_samples, uniform_final, target_probs, draft_probs, threshold_single, threshold_acc,
                          predicts, accept_index, accept_token_num):
    """Dialect `le`: see `specverify.oracles.tree_verify.sample_target_only_le`."""
    sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           rule="le")
