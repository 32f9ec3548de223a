"""Oracles of tree verification: `tree.verify_greedy` (and its `longest_path` dialect) and
`tree.sample_target_only` (and its `le` dialect).

Loop-level and obviously correct; destination passing; invalid input refused with an error naming the
field. The checks (`check_links`, `check_verify_greedy`, `check_sample_target_only`) are shared with the
production kernels (`values=False` skips the checks that read array contents).

Notation: request b has N nodes, node 0 its root; `retrieve_next_token[b, i]` is node i's first child
(-1: none), `retrieve_next_sibling[b, i]` the next node of the same child list (-1: the list ends). The
child list of node r is next_token[b, r], then next_sibling of that, and so on, in that order (any
order of node numbers). A node's flat slot is `retrieve_index[b, i]`.

Choices where the sources are silent:
- the links must describe a forest: no node is the target of two links (of either kind) and no walk
  along the links returns to a node. Both are refused as invalid input (a walk over a cycle would not
  end; a node with two parents has no single root-to-node path);
- a candidate that is not a token id of the target (-1, any negative value, anything >= V in
  `sample_target_only`, anything that is no target prediction in `verify_greedy`) never matches and is
  never used to read a probability: such a sibling is rejected unread (no mass, no draft_probs write);
- `longest_path`: the accepted path is the first root-to-node path, in preorder with child lists taken
  in list order, whose every step matches and whose depth is min(S - 1, the deepest such path's depth).
  This is the first root-to-leaf path of that matched length when paths are listed depth-first in list
  order (TensorRT-LLM's static-tree rule, a strictly longer path replaces the best).
"""
from __future__ import annotations

import numpy as np

from specverify.oracles.arguments import need_dtype, need_ndim, need_shape

INT32_MAX = 2**31 - 1
THR_FLOOR = np.float32(1e-9)   # threshold_acc is used as max(threshold_acc, 1e-9)
TREE = "B, N = candidates.shape"


def host(a) -> np.ndarray:
    """A NumPy copy-free view of a NumPy array or a torch tensor (copied to the host)."""
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


def link_problem(next_token: np.ndarray, next_sibling: np.ndarray) -> str | None:
    """Why the links of a [B, N] batch are not a forest (None: they are). Vectorised: in-degrees, then
    peeling nodes no remaining link points at; nodes left over sit on a cycle."""
    batch, n = next_token.shape
    links = np.stack([next_token, next_sibling])                 # [2, B, N]
    rows = np.broadcast_to(np.arange(batch)[None, :, None], links.shape)
    live = links >= 0
    indegree = np.bincount((rows * n + links)[live], minlength=batch * n).reshape(batch, n)
    if (indegree > 1).any():
        b, j = map(int, np.argwhere(indegree > 1)[0])
        return (f"retrieve_next_token/retrieve_next_sibling: node {j} of request {b} is the target of two links "
                "(the links must form a forest)")
    remaining = indegree.copy()
    alive = np.ones((batch, n), bool)
    for _ in range(n):
        free = alive & (remaining == 0)
        if not free.any():
            break
        alive &= ~free
        drop = live & free[None]
        np.subtract.at(remaining, (rows[drop], links[drop]), 1)
    if alive.any():
        b, j = map(int, np.argwhere(alive)[0])
        return (f"retrieve_next_token/retrieve_next_sibling: node {j} of request {b} lies on a cycle of links "
                "(the links must form a forest)")
    return None


def check_links(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, values=True) -> tuple[int, int]:
    """The tree fields every tree stage shares; returns (B, N)."""
    need_dtype("candidates", candidates, "int64")
    need_ndim("candidates", candidates, 2)
    batch, n = (int(x) for x in candidates.shape)
    for name, a in (("retrieve_index", retrieve_index), ("retrieve_next_token", retrieve_next_token),
                    ("retrieve_next_sibling", retrieve_next_sibling)):
        need_dtype(name, a, "int64")
        need_shape(name, a, (batch, n), TREE)
    if batch and not n:
        raise ValueError(f"candidates: every request needs its root node (N >= 1), got shape {[batch, n]}")
    if values and batch:
        index = host(retrieve_index)
        if index.min() < 0 or index.max() >= batch * n:
            raise ValueError(f"retrieve_index: every slot must lie in [0, B*N) = [0, {batch * n}), "
                             f"found {int(index.min()) if index.min() < 0 else int(index.max())}")
        token, sibling = host(retrieve_next_token), host(retrieve_next_sibling)
        for name, a in (("retrieve_next_token", token), ("retrieve_next_sibling", sibling)):
            if a.min() < -1 or a.max() >= n:
                bad = int(a.min()) if a.min() < -1 else int(a.max())
                raise ValueError(f"{name}: every link must be -1 or a node in [0, N) = [0, {n}), found {bad}")
        problem = link_problem(token, sibling)
        if problem:
            raise ValueError(problem)
    return batch, n


def check_outputs(batch: int, n: int, predicts, accept_index, accept_token_num) -> int:
    """The three outputs of a verification stage; returns S."""
    need_dtype("predicts", predicts, "int32")
    need_shape("predicts", predicts, (batch * n,), "B*N")
    need_dtype("accept_index", accept_index, "int32")
    need_ndim("accept_index", accept_index, 2)
    if int(accept_index.shape[0]) != batch:
        raise ValueError(f"accept_index: shape must be [B, S] with B = {batch}, got {list(accept_index.shape)}")
    spec = int(accept_index.shape[1])
    if spec < 1:
        raise ValueError(f"accept_index: S = accept_index.shape[1] must be >= 1 (the root's slot), got {spec}")
    need_dtype("accept_token_num", accept_token_num, "int32")
    need_shape("accept_token_num", accept_token_num, (batch,), "B")
    return spec


def check_verify_greedy(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                        predicts, accept_index, accept_token_num, values=True) -> tuple[int, int, int]:
    """Returns (B, N, S)."""
    batch, n = check_links(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, values)
    need_dtype("target_predict", target_predict, "int64")
    need_shape("target_predict", target_predict, (batch, n), TREE)
    spec = check_outputs(batch, n, predicts, accept_index, accept_token_num)
    if values and batch:
        tp = host(target_predict)
        if tp.min() < 0 or tp.max() > INT32_MAX:
            bad = int(tp.min()) if tp.min() < 0 else int(tp.max())
            raise ValueError(f"target_predict: every prediction must lie in [0, 2**31) (stored as int32), found {bad}")
    return batch, n, spec


def child_list(next_token, next_sibling, b: int, row: int) -> list[int]:
    """The children of node `row` of request b, in list order."""
    found, c = [], int(next_token[b, row])
    while c != -1:
        found.append(c)
        c = int(next_sibling[b, c])
    return found


def verify_greedy(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                  predicts, accept_index, accept_token_num):
    """Greedy tree verification: from the root, go down to the first child (in list order) whose token
    is the target's prediction at the current node, never backtracking; at most S - 1 levels. Each
    node on the path gets the target's prediction at its slot in `predicts`."""
    batch, n, spec = check_verify_greedy(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                                         target_predict, predicts, accept_index, accept_token_num)
    tp = target_predict.reshape(-1)
    for b in range(batch):
        path = [0]
        for _ in range(spec - 1):
            want = tp[retrieve_index[b, path[-1]]]
            chosen = [c for c in child_list(retrieve_next_token, retrieve_next_sibling, b, path[-1])
                      if candidates[b, c] == want]
            if not chosen:
                break
            path.append(chosen[0])
        write_path(b, path, retrieve_index, [tp[retrieve_index[b, i]] for i in path], predicts, accept_index,
                   accept_token_num)


def write_path(b: int, path: list[int], retrieve_index, emitted: list, predicts, accept_index,
               accept_token_num) -> None:
    """Request b accepted the nodes `path` (the root first): their slots, the token emitted at each."""
    for k, node in enumerate(path):
        slot = int(retrieve_index[b, node])
        accept_index[b, k] = slot
        predicts[slot] = emitted[k]
    accept_token_num[b] = len(path) - 1


def verify_longest_path(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                        predicts, accept_index, accept_token_num):
    """Dialect `longest_path`: the deepest matching path (capped at S - 1 levels); among equally deep
    ones the first in preorder, child lists in list order."""
    batch, n, spec = check_verify_greedy(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                                         target_predict, predicts, accept_index, accept_token_num)
    tp = target_predict.reshape(-1)
    for b in range(batch):
        best: list[int] = [0]
        stack = [[0]]
        while stack:   # preorder: pop a path, push its matching children so the first is popped first
            path = stack.pop()
            if len(path) > len(best):
                best = path
            if len(path) == spec:
                continue
            want = tp[retrieve_index[b, path[-1]]]
            children = [c for c in child_list(retrieve_next_token, retrieve_next_sibling, b, path[-1])
                        if candidates[b, c] == want]
            stack.extend(path + [c] for c in reversed(children))
        write_path(b, best, retrieve_index, [tp[retrieve_index[b, i]] for i in best], predicts, accept_index,
                   accept_token_num)


# ---------------------------------------------------------------- tree.sample_target_only

def check_sample_target_only(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                             uniform_samples, uniform_final, target_probs, draft_probs, threshold_single,
                             threshold_acc, predicts, accept_index, accept_token_num, values=True):
    """Returns (B, N, S, V)."""
    batch, n = check_links(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, values)
    need_dtype("uniform_samples", uniform_samples, "float32")
    need_shape("uniform_samples", uniform_samples, (batch, n), TREE)
    need_dtype("uniform_final", uniform_final, "float32")
    need_shape("uniform_final", uniform_final, (batch,), "B = candidates.shape[0]")
    need_dtype("target_probs", target_probs, "float32")
    need_ndim("target_probs", target_probs, 3)
    vocab = int(target_probs.shape[2])
    need_shape("target_probs", target_probs, (batch, n, vocab), TREE)
    if vocab < 1:
        raise ValueError("target_probs: the vocabulary V = target_probs.shape[2] must be >= 1")
    need_dtype("draft_probs", draft_probs, "float32")
    need_shape("draft_probs", draft_probs, (batch, n, vocab), "[B, N, V] of target_probs")
    for name, x in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"{name}: must be a Python float, got {type(x).__name__}")
        if not 0.0 <= x <= 1.0:
            raise ValueError(f"{name}: must lie in [0, 1], got {x}")
    spec = check_outputs(batch, n, predicts, accept_index, accept_token_num)
    if spec > n:
        raise ValueError(f"accept_index: S = {spec} must be at most N = {n} (a path has at most N nodes)")
    return batch, n, spec, vocab


def sample_target_only(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples,
                       uniform_final, target_probs, draft_probs, threshold_single, threshold_acc, predicts,
                       accept_index, accept_token_num):
    """Tree rejection sampling against the target alone (see the stage record): a child is accepted
    iff p > 0 and (coin < mass / threshold or p >= threshold_single)."""
    sample_tree(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples,
                uniform_final, target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index,
                accept_token_num, "lt")


def sample_target_only_le(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                          uniform_samples, uniform_final, target_probs, draft_probs, threshold_single, threshold_acc,
                          predicts, accept_index, accept_token_num):
    """Dialect `le`: a child is accepted iff coin <= mass / threshold or p >= threshold_single."""
    sample_tree(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples,
                uniform_final, target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index,
                accept_token_num, "le")


def sample_tree(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples,
                uniform_final, target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index,
                accept_token_num, rule: str) -> None:
    """The walk, the draft_probs writes and the pick of both rules ("lt": the record's, "le")."""
    batch, n, spec, vocab = check_sample_target_only(
        candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
        target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num)
    single = np.float32(threshold_single)
    acc = max(np.float32(threshold_acc), THR_FLOOR)
    for b in range(batch):
        path, emitted, row = [0], [], 0
        while len(path) < spec:
            coin, mass, chosen = uniform_samples[b, row], np.float32(0), None
            for c in child_list(retrieve_next_token, retrieve_next_sibling, b, row):
                x = int(candidates[b, c])
                if not 0 <= x < vocab:
                    continue                      # not a token: rejected unread
                p = target_probs[b, row, x]
                mass = np.float32(mass + p)
                share = np.float32(mass / acc)
                if rule == "le":
                    accept = bool(coin <= share) or bool(p >= single)
                else:
                    accept = bool(p > 0) and (bool(coin < share) or bool(p >= single))
                if accept:
                    chosen = c
                    break
                draft_probs[b, row, x] = p
            if chosen is None:
                break
            emitted.append(candidates[b, chosen])
            path.append(chosen)
            row = chosen
        if len(path) == spec:
            res = target_probs[b, row].copy()
        else:
            res = np.maximum(target_probs[b, row] - draft_probs[b, row], np.float32(0))
        emitted.append(pick(res, uniform_final[b]))
        write_path(b, path, retrieve_index, emitted, predicts, accept_index, accept_token_num)


def pick(res: np.ndarray, u: np.float32) -> int:
    """Inverse-CDF pick from the residual: the lowest v with res[v] > 0 whose running sum passes
    t = f32(u * sum(res)); else the largest v with res[v] > 0; else V - 1. Running sums in f32, left
    to right (`np.cumsum` of a float32 array adds in float32, in order)."""
    cdf = np.cumsum(res, dtype=np.float32)
    t = np.float32(u * cdf[-1])
    passes = np.flatnonzero((res > 0) & (cdf > t))
    if len(passes):
        return int(passes[0])
    positive = np.flatnonzero(res > 0)
    return int(positive[-1]) if len(positive) else len(res) - 1
