"""Random tree shapes as the (first child, next sibling) links the tree stages read.

A request's tree is drawn as a parent array over its N nodes (node 0 the root, -1: unused or the head
of a detached tree), then turned into links with each child list in a drawn order, and sometimes with
the node numbers permuted (the root stays node 0). Shapes (`SHAPES`): k-ary, random irregular, star,
chain, depth 1 (a few children of the root, the other nodes unused), root only (every other node
unused), and padded (an irregular tree on some nodes, the rest unused or a detached tree that no walk
from the root reaches, sometimes hung on the root's sibling link, which no walk reads; or else, in half
of such requests, the root itself listed as the first or a later child of a node outside its tree: the
root heads its tree whatever links to it). Orders:
ascending node numbers (what `tree.build` writes), descending, or shuffled. Every draw is a forest:
no node is the target of two links and no walk along the links returns to a node.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from specverify.strategies.blocks import generator, label

SHAPES = ("k-ary", "irregular", "star", "chain", "depth 1", "root only", "padded")
ORDERS = ("ascending", "descending", "shuffled")
NODE_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 31, 33)   # non-powers of two around the tile edges
LARGE_NODE_COUNTS = (63, 64, 65, 100)


@dataclass(frozen=True)
class Trees:
    """A batch of B trees of N nodes: the links, each node's parent (-1: none) and depth (-1: not
    reached from the root)."""
    next_token: np.ndarray      # [B, N] int64
    next_sibling: np.ndarray    # [B, N] int64
    parent: np.ndarray          # [B, N] int64
    depth: np.ndarray           # [B, N] int64

    @property
    def max_depth(self) -> int:
        return int(self.depth.max(initial=0))


def parents(shape: str, n: int, rng: np.random.Generator, arity: int) -> np.ndarray:
    """The parent of each node in natural numbering (a parent precedes its children); -1: none."""
    parent = np.full(n, -1, np.int64)
    nodes = np.arange(1, n)
    if shape == "k-ary":
        parent[1:] = (nodes - 1) // arity
    elif shape == "irregular":
        parent[1:] = [rng.integers(0, i) for i in nodes]
    elif shape == "star":
        parent[1:] = 0
    elif shape == "chain":
        parent[1:] = nodes - 1
    elif shape == "depth 1" and n > 1:
        parent[1:1 + int(rng.integers(1, n))] = 0
    elif shape == "padded":
        used = int(rng.integers(1, n + 1))
        parent[1:used] = [rng.integers(0, i) for i in range(1, used)]
        if used + 1 < n and rng.random() < 0.5:   # a detached tree headed by node `used`
            parent[used + 1:] = [rng.integers(used, i) for i in range(used + 1, n)]
    return parent


def links(parent: np.ndarray, order: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(next_token, next_sibling) of one tree, child lists in `order`."""
    n = len(parent)
    next_token, next_sibling = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    for p in range(n):
        children = np.flatnonzero(parent == p)
        if order == "descending":
            children = children[::-1]
        elif order == "shuffled":
            children = rng.permutation(children)
        if len(children):
            next_token[p] = children[0]
            next_sibling[children[:-1]] = children[1:]
    return next_token, next_sibling


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of each node below the root (-1: not in the root's tree)."""
    depth = np.full(len(parent), -1, np.int64)
    depth[0] = 0
    for _ in range(len(parent)):
        known = (parent >= 0) & (depth < 0)
        above = depth[np.maximum(parent, 0)]
        depth = np.where(known & (above >= 0), above + 1, depth)
    return depth


def renumbered(parent: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The same tree with nodes 1..N-1 relabelled by a random permutation."""
    n = len(parent)
    new = np.concatenate([[0], 1 + rng.permutation(n - 1)]).astype(np.int64)   # old node -> new node
    moved = np.full(n, -1, np.int64)
    moved[new] = np.where(parent >= 0, new[np.maximum(parent, 0)], -1)
    return moved


@st.composite
def node_count(draw, small: bool) -> int:
    """N: small counts around the power-of-two edges, rarely a large one (in the interpreter at most 17)."""
    if not small and draw(st.integers(0, 9)) == 9:   # shrinks towards the small counts
        return draw(st.sampled_from(LARGE_NODE_COUNTS))
    return draw(st.sampled_from([n for n in NODE_COUNTS if not small or n <= 17]))


@st.composite
def trees(draw, batch: int, n: int, shape: str | None = None) -> Trees:
    """B trees of N nodes: one shape for the batch (or, one time in four, a shape per request), one
    sibling order, sometimes renumbered. Each request's shape is labelled."""
    rng = draw(generator())
    mixed = draw(st.integers(0, 3)) == 0
    chosen = shape or draw(st.sampled_from(SHAPES))
    order = draw(st.sampled_from(ORDERS))
    arity = draw(st.integers(1, 4))
    shuffle = draw(st.booleans())
    hang = draw(st.integers(0, 3)) == 0
    if mixed and shape is None:
        label("tree: mixed shapes")
    label(f"tree: siblings {order}")
    label("tree: N=1" if n == 1 else "tree: N a power of two" if n & (n - 1) == 0 else "tree: N not a power of two")
    found = {k: np.full((batch, n), -1, np.int64) for k in ("next_token", "next_sibling", "parent", "depth")}
    free = {}     # per padded request: its nodes outside the root's tree
    for b in range(batch):
        kind = str(rng.choice(SHAPES)) if mixed and shape is None else chosen
        label(f"tree: {kind}")
        parent = parents(kind, n, rng, arity)
        if shuffle and n > 2:
            parent = renumbered(parent, rng)
        token, sibling = links(parent, order, rng)
        heads = np.flatnonzero((parent < 0) & (token >= 0))
        heads = heads[heads > 0]
        depth = depths(parent)
        if kind == "padded" and hang and len(heads):
            sibling[0] = heads[0]             # a detached tree on the root's sibling link
            label("tree: detached tree on the root's sibling link")
        elif kind == "padded" and len(outside := np.flatnonzero(depth < 0)):
            free[b] = outside
        found["next_token"][b], found["next_sibling"][b] = token, sibling
        found["parent"][b], found["depth"][b] = parent, depth
    for b, outside in free.items():       # decided after every request's draws: those keep their values
        if rng.random() < 0.5:            # the root listed as a child of a node no walk from it reaches
            hang_root(found["next_token"][b], found["next_sibling"][b], int(rng.choice(outside)))
    return Trees(**found)


def hang_root(next_token: np.ndarray, next_sibling: np.ndarray, owner: int) -> None:
    """List the root as the last child of `owner`, a node outside the root's tree: its only child, or after
    its children (the root is then some node's next sibling). No walk from the root returns to it."""
    label("tree: the root in the child list of a node outside its tree")
    if next_token[owner] < 0:
        next_token[owner] = 0
        return
    last = int(next_token[owner])
    while next_sibling[last] >= 0:
        last = int(next_sibling[last])
    next_sibling[last] = 0
    label("tree: the root a later child of a node outside its tree")
