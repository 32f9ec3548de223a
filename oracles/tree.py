"""Oracle of the `tree` family: the index arrays and attention masks of a draft token tree (`tree.build`,
`tree.reconstruct_from_mask`, `tree.pack_mask`) and its verification (`tree.verify_greedy` with its
`longest_path` dialect, `tree.sample_target_only` with its `le` dialect).

Loop-level and obviously correct: one request at a time, one node at a time. Destination passing;
invalid input is refused with an error naming the field. The `check_*` functions are shared with the
production kernels (`values=False` skips the checks that read array contents).

Tree words: request b has N nodes, node 0 its root (the last verified token). `tree.build` numbers node
i's flat slot b*N + i, `next_token[i]` is i's first (lowest-numbered) child, `next_sibling[i]` the next
higher-numbered child of i's parent; -1 where there is none. The verification stages read any such links:
`retrieve_next_token[b, i]` is node i's first child (-1: none), `retrieve_next_sibling[b, i]` the next
node of the same child list (-1: the list ends). The child list of node r is next_token[b, r], then
next_sibling of that, and so on, in that order (any order of node numbers). A node's flat slot is
`retrieve_index[b, i]`.

Choices where the sources are silent:
- `tree.build` takes N as a scalar (as the engines pass `draft_token_num`) and checks every shape
  against it; with depth = 1, parent_list is never read and may have 0 or 1 columns;
- `verified_seq_len` is a length: 0 <= seq < 2**62 in both stages that read it;
- `tree.build` FULL_MASK writes only each row's tree block: the prefix columns keep what the caller put
  there, and every mask element past what the mode needs is untouched in all modes;
- `tree.pack_mask` takes `packed_indptr[0] >= 0` (a leading gap is allowed), Q >= 1, and needs
  `len(packed) >= packed_indptr[B]`;
- the verification links must describe a forest: no node is the target of two links (of either kind) and
  no walk along the links returns to a node. Both are refused as invalid input (a walk over a cycle would
  not end; a node with two parents has no single root-to-node path);
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

from specverify.oracles.arguments import need_dtype, need_int, need_ndim, need_shape

MAX_NODES = 1024                 # one thread per node in the engines
MAX_SEQ = 2**62                  # verified_seq_len stays below this (positions fit int64 with room)
FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING = 0, 1, 2
MODES = (FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING)
MAX_PACKED_NODES = 32            # mode 2 keeps a row in at most 4 bytes


def host(a):
    """NumPy view of an array argument (a torch tensor is copied to the host)."""
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


def row_bytes(nodes: int) -> int:
    """W: the bytes of one bit-packed mask row (mode 2)."""
    return 1 if nodes <= 8 else 2 if nodes <= 16 else 4


def mask_length(mode: int, nodes: int, seq) -> int:
    """Elements of tree_mask a mode needs, for the verified lengths `seq` (a host array)."""
    batch = len(seq)
    if mode == FULL_MASK:
        return int(np.sum(seq, dtype=np.int64)) * nodes + batch * nodes * nodes
    if mode == QLEN_ONLY:
        return batch * nodes * nodes
    return batch * nodes * row_bytes(nodes)


def need_nodes(N) -> int:
    need_int("N", N, 1)
    if N > MAX_NODES:
        raise ValueError(f"N: must be in 1..{MAX_NODES}, got {N}")
    return N


def need_lengths(name: str, seq) -> None:
    values = host(seq)
    if len(values) and (values.min() < 0 or values.max() >= MAX_SEQ):
        raise ValueError(f"{name}: every length must be in [0, 2**62), found {int(values.min())}..{int(values.max())}")


def need_index_outputs(batch: int, N: int, positions, retrieve_index, retrieve_next_token,
                       retrieve_next_sibling) -> None:
    need_dtype("positions", positions, "int64")
    need_shape("positions", positions, (batch * N,), "B*N, B = len(verified_seq_len)")
    for name, a in (("retrieve_index", retrieve_index), ("retrieve_next_token", retrieve_next_token),
                    ("retrieve_next_sibling", retrieve_next_sibling)):
        need_dtype(name, a, "int64")
        need_shape(name, a, (batch, N), "B = len(verified_seq_len), N")


# ---------------------------------------------------------------- tree.build

def build_parents(parent_list: np.ndarray, selected: np.ndarray, topk: int) -> list[int]:
    """parent(i) of one request's nodes (-1 for the root), or ValueError naming the broken rule."""
    parents = [-1]
    node_of: dict[int, int] = {}        # entry -> the lowest j holding it
    for j in range(len(selected)):
        node_of.setdefault(int(selected[j]), j)
    for i in range(1, len(selected) + 1):
        group = int(selected[i - 1]) // topk
        if group == 0:
            parents.append(0)
            continue
        wanted = int(parent_list[group])
        if wanted not in node_of:
            raise ValueError(f"parent_list: node {i}'s parent entry {wanted} (parent_list[{group}]) is not "
                             "in selected_index")
        parent = node_of[wanted] + 1
        if parent >= i:
            raise ValueError(f"parent_list: node {i}'s parent is node {parent}, not an earlier node")
        parents.append(parent)
    return parents


def check_build(parent_list, selected_index, verified_seq_len, topk, depth, N, tree_mask_mode, tree_mask,
                positions, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                values: bool = True) -> int:
    """The argument checks of `build`; returns the mask elements the mode needs (0 when not computed:
    FULL_MASK's size depends on the lengths, so it is known only when values are read)."""
    need_int("topk", topk, 1)
    need_int("depth", depth, 1)
    need_nodes(N)
    need_int("tree_mask_mode", tree_mask_mode)
    if tree_mask_mode not in MODES:
        raise ValueError(f"tree_mask_mode: must be 0 (FULL_MASK), 1 (QLEN_ONLY) or 2 (QLEN_ONLY_BITPACKING), "
                         f"got {tree_mask_mode}")
    if tree_mask_mode == QLEN_ONLY_BITPACKING and N > MAX_PACKED_NODES:
        raise ValueError(f"N: bit-packed masks (mode 2) hold at most {MAX_PACKED_NODES} nodes, got {N}")
    need_dtype("verified_seq_len", verified_seq_len, "int64")
    need_ndim("verified_seq_len", verified_seq_len, 1)
    batch = verified_seq_len.shape[0]
    need_dtype("parent_list", parent_list, "int64")
    need_ndim("parent_list", parent_list, 2)
    width = topk * (depth - 1) + 1
    if depth > 1:
        need_shape("parent_list", parent_list, (batch, width), "B = len(verified_seq_len), topk*(depth-1)+1")
    elif tuple(parent_list.shape) not in ((batch, 0), (batch, 1)):
        raise ValueError(f"parent_list: shape must be [{batch}, 0] or [{batch}, 1] (depth 1, B = len(verified_seq_len)), "
                         f"got {list(parent_list.shape)}")
    need_dtype("selected_index", selected_index, "int64")
    need_shape("selected_index", selected_index, (batch, N - 1), "B = len(verified_seq_len), N-1")
    need_index_outputs(batch, N, positions, retrieve_index, retrieve_next_token, retrieve_next_sibling)
    need_dtype("tree_mask", tree_mask, "uint8" if tree_mask_mode == QLEN_ONLY_BITPACKING else "bool")
    need_ndim("tree_mask", tree_mask, 1)
    needed = 0 if tree_mask_mode == FULL_MASK else mask_length(tree_mask_mode, N, range(batch))
    if values:
        seq = host(verified_seq_len)
        need_lengths("verified_seq_len", seq)
        needed = mask_length(tree_mask_mode, N, seq)
        selected, parents = host(selected_index), host(parent_list)
        entries = topk + (depth - 1) * topk * topk
        if selected.size and (selected.min() < 0 or selected.max() >= entries):
            raise ValueError(f"selected_index: entries must be in [0, topk + (depth-1)*topk**2 = {entries}), found "
                             f"{int(selected.min())}..{int(selected.max())}")
        if N > 2 and (np.diff(selected, axis=1) <= 0).any():
            raise ValueError("selected_index: every row must be strictly increasing")
        if depth > 1:
            for b in range(batch):
                build_parents(parents[b], selected[b], topk)
    if tree_mask.shape[0] < needed:
        raise ValueError(f"tree_mask: needs at least {needed} elements in mode {tree_mask_mode} "
                         f"(B = len(verified_seq_len), N = {N}), "
                         f"got {tree_mask.shape[0]}")
    return needed


def build(*, parent_list, selected_index, verified_seq_len, topk, depth, N, tree_mask_mode, tree_mask,
          positions, retrieve_index, retrieve_next_token, retrieve_next_sibling):
    """The draft tree of each request from its beam search, as positions, links and an attention mask.

    Node i >= 1 is the score-list entry selected_index[b, i-1]; its parent is the root when that entry
    came from the first step (entry // topk == 0), else the node whose entry is the beam the entry grew
    from (parent_list[b, entry // topk]). positions = seq + depth; retrieve_index = b*N + i; next_token
    and next_sibling as in the module doc, every element written. Mask row i holds 1 at i and at each
    ancestor of i (the root included), 0 at the other tree columns: QLEN_ONLY row at N*N*b + N*i;
    FULL_MASK row at N*N*b + N*sum(seq[:b]) + (seq[b]+N)*i with the tree block after seq[b] untouched
    prefix columns; QLEN_ONLY_BITPACKING row as W little-endian bytes at (b*N + i)*W.
    """
    check_build(parent_list, selected_index, verified_seq_len, topk, depth, N, tree_mask_mode, tree_mask,
                positions, retrieve_index, retrieve_next_token, retrieve_next_sibling)
    offset = 0   # FULL_MASK: sum of the earlier requests' verified lengths
    for b in range(verified_seq_len.shape[0]):
        seq = int(verified_seq_len[b])
        parents = build_parents(parent_list[b], selected_index[b], topk) if N > 1 else [-1]
        write_links(b, N, parents, retrieve_index, retrieve_next_token, retrieve_next_sibling)
        rows = ancestor_rows(parents)
        for i in range(N):
            positions[b * N + i] = seq + int(rows[i].sum()) - 1
            if tree_mask_mode == QLEN_ONLY:
                tree_mask[N * N * b + N * i: N * N * b + N * (i + 1)] = rows[i]
            elif tree_mask_mode == FULL_MASK:
                start = N * N * b + N * offset + (seq + N) * i + seq
                tree_mask[start: start + N] = rows[i]
            else:
                width = row_bytes(N)
                bits = sum(1 << j for j in range(N) if rows[i, j])
                for w in range(width):
                    tree_mask[(b * N + i) * width + w] = (bits >> (8 * w)) & 0xFF
        offset += seq


def ancestor_rows(parents: list[int]) -> np.ndarray:
    """[N, N] bool: row i marks i itself and every ancestor of i (parents come before their children)."""
    nodes = len(parents)
    rows = np.zeros((nodes, nodes), bool)
    for i in range(nodes):
        if parents[i] >= 0:
            rows[i] = rows[parents[i]]
        rows[i, i] = True
    return rows


def write_links(b: int, N: int, parents: list[int], retrieve_index, retrieve_next_token,
                retrieve_next_sibling) -> None:
    """retrieve_index, next_token (first child) and next_sibling (next higher-numbered sibling; never for a
    node without a parent) of request b, every element written."""
    last_child: dict[int, int] = {}
    for i in range(N):
        retrieve_index[b, i] = b * N + i
        retrieve_next_token[b, i] = -1
        retrieve_next_sibling[b, i] = -1
    for i in range(N):
        p = parents[i]
        if p < 0:
            continue
        if p in last_child:
            retrieve_next_sibling[b, last_child[p]] = i
        else:
            retrieve_next_token[b, p] = i
        last_child[p] = i


# ---------------------------------------------------------------- tree.reconstruct_from_mask

def check_reconstruct(tree_mask, verified_seq_len, N, positions, retrieve_index, retrieve_next_token,
                      retrieve_next_sibling, values: bool = True) -> int:
    """The argument checks of `reconstruct_from_mask`; returns B."""
    need_nodes(N)
    need_dtype("verified_seq_len", verified_seq_len, "int64")
    need_ndim("verified_seq_len", verified_seq_len, 1)
    batch = verified_seq_len.shape[0]
    need_dtype("tree_mask", tree_mask, "bool")
    need_ndim("tree_mask", tree_mask, 1)
    if tree_mask.shape[0] < batch * N * N:
        raise ValueError(f"tree_mask: needs at least B*N*N = {batch * N * N} elements (B = len(verified_seq_len)), "
                         f"got {tree_mask.shape[0]}")
    need_index_outputs(batch, N, positions, retrieve_index, retrieve_next_token, retrieve_next_sibling)
    if values:
        need_lengths("verified_seq_len", verified_seq_len)
    return batch


def reconstruct_from_mask(*, tree_mask, verified_seq_len, N, positions, retrieve_index, retrieve_next_token,
                          retrieve_next_sibling):
    """Positions and links of each request's tree from its ancestor mask (mask[b, i, j]: j is an ancestor
    of i, read only below the diagonal). With A(i) the marked j < i: positions = seq + |A(i)|,
    parent(i) = max A(i) (none when empty), next_token[i] = the lowest k > i whose row marks i,
    next_sibling[i] = the lowest k > i with the same parent (none for a node without a parent);
    retrieve_index = b*N + i. Every element of rows < B is written."""
    batch = check_reconstruct(tree_mask, verified_seq_len, N, positions, retrieve_index, retrieve_next_token,
                              retrieve_next_sibling)
    for b in range(batch):
        mask = np.asarray(tree_mask[b * N * N: (b + 1) * N * N], bool).reshape(N, N)
        parents = []
        for i in range(N):
            marked = np.flatnonzero(mask[i, :i])
            positions[b * N + i] = int(verified_seq_len[b]) + len(marked)
            parents.append(int(marked[-1]) if len(marked) else -1)
        for i in range(N):
            retrieve_index[b, i] = b * N + i
            below = np.flatnonzero(mask[i + 1:, i])
            retrieve_next_token[b, i] = i + 1 + int(below[0]) if len(below) else -1
            later = [k for k in range(i + 1, N) if parents[k] == parents[i]] if parents[i] >= 0 else []
            retrieve_next_sibling[b, i] = later[0] if later else -1


# ---------------------------------------------------------------- tree.pack_mask

def check_pack(mask, kv_indptr, packed_indptr, Q, max_kv_len, packed, values: bool = True) -> int:
    """The argument checks of `pack_mask`; returns B."""
    need_int("Q", Q, 1)
    need_int("max_kv_len", max_kv_len)
    need_dtype("mask", mask, "bool")
    need_ndim("mask", mask, 1)
    need_dtype("kv_indptr", kv_indptr, "int32")
    need_ndim("kv_indptr", kv_indptr, 1)
    if kv_indptr.shape[0] < 1:
        raise ValueError("kv_indptr: must hold B+1 >= 1 offsets (a leading 0), got none")
    batch = kv_indptr.shape[0] - 1
    need_dtype("packed_indptr", packed_indptr, "int32")
    need_shape("packed_indptr", packed_indptr, (batch + 1,), "B+1 = len(kv_indptr)")
    need_dtype("packed", packed, "uint8")
    need_ndim("packed", packed, 1)
    if values:
        kv, out = host(kv_indptr).astype(np.int64), host(packed_indptr).astype(np.int64)
        if kv[0] != 0:
            raise ValueError(f"kv_indptr: must start at 0, got {int(kv[0])}")
        lengths = np.diff(kv)
        if (lengths < 0).any():
            raise ValueError("kv_indptr: must be non-decreasing")
        if len(lengths) and lengths.max() > max_kv_len:
            raise ValueError(f"kv_indptr: a segment of {int(lengths.max())} columns is longer than "
                             f"max_kv_len = {max_kv_len}")
        if out[0] < 0:
            raise ValueError(f"packed_indptr: must start at a byte offset >= 0, got {int(out[0])}")
        room = np.diff(out)
        need = -(-Q * lengths // 8)
        if (room < need).any():
            r = int(np.flatnonzero(room < need)[0])
            raise ValueError(f"packed_indptr: request {r}'s {int(need[r])} bytes overlap the next segment "
                             f"({int(room[r])} bytes between offsets)")
        if mask.shape[0] < Q * kv[-1]:
            raise ValueError(f"mask: needs at least Q*kv_indptr[B] = {Q * int(kv[-1])} elements, "
                             f"got {mask.shape[0]}")
        if packed.shape[0] < out[-1]:
            raise ValueError(f"packed: needs at least packed_indptr[B] = {int(out[-1])} bytes, "
                             f"got {packed.shape[0]}")
    return batch


def pack_mask(*, mask, kv_indptr, packed_indptr, Q, max_kv_len, packed):
    """Request r's Q x kv_len bits (from mask element Q*kv_indptr[r]) packed little endian into bytes
    from packed_indptr[r]: byte k holds bits 8k .. 8k+7 of the segment, bit 0 lowest; bits past the
    segment's end are 0. Bytes outside the segments are untouched."""
    batch = check_pack(mask, kv_indptr, packed_indptr, Q, max_kv_len, packed)
    for r in range(batch):
        start = Q * int(kv_indptr[r])
        count = Q * (int(kv_indptr[r + 1]) - int(kv_indptr[r]))
        for k in range(-(-count // 8)):
            byte = 0
            for bit in range(8):
                if 8 * k + bit < count and mask[start + 8 * k + bit]:
                    byte |= 1 << bit
            packed[int(packed_indptr[r]) + k] = byte


# ---------------------------------------------------------------- tree verification

INT32_MAX = 2**31 - 1
THR_FLOOR = np.float32(1e-9)   # threshold_acc is used as max(threshold_acc, 1e-9)
TREE = "B, N = candidates.shape"


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
