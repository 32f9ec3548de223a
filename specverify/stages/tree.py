"""Stage records of the `tree` family: the draft token tree's indices and masks (EAGLE top-k trees) and its
verification (`tree.verify_greedy` with its `longest_path` dialect, `tree.sample_target_only` with its `le`
dialect).

Where the sources are silent (see `specverify.oracles.tree`): `tree.build` takes N as a scalar and
checks every shape against it; lengths are in [0, 2**62); FULL_MASK writes only the tree blocks;
`tree.pack_mask` allows a leading gap before the first output segment. For verification, the links must
form a forest (a node linked to twice is refused like a cycle); a candidate that is not a token id never
matches and is never read from; `longest_path` takes the first of the deepest matching paths in preorder
(child lists in list order), capped at S - 1 levels.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles import tree as oracle
from specverify.records import bench_inputs as bench
from specverify.records.randomness import Randomness
from specverify.records.stage import BENCH_SPEC, Buffer, Dialect, Example, Floor, I, O
from specverify.records.wiring import kernels, wired
from specverify.strategies import panels
from specverify.strategies import tree as draw
from specverify.strategies.tree_shapes import depths, links, parents

BENCH_TOPK, BENCH_DEPTH = 4, 3      # SGLang's EAGLE defaults: 4 beams, 3 steps


def index_outputs() -> tuple:
    return (
        O("positions", "int64", "B*N", doc="flat b*N + i: seq[b] + depth of node i"),
        O("retrieve_index", "int64", "B, N", doc="b*N + i: each node's flat slot"),
        O("retrieve_next_token", "int64", "B, N", doc="first (lowest-numbered) child, -1 if none"),
        O("retrieve_next_sibling", "int64", "B, N", doc="next higher-numbered child of the same parent, -1 if none"),
    )


def bench_lengths(rng: np.random.Generator, batch: int) -> np.ndarray:
    return rng.integers(64, 1025, batch).astype(np.int64)


def build_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: B requests of BENCH_SPEC drafts from a 4-beam, 3-step search, FULL_MASK after 64 to 1024
    verified tokens each."""
    nodes = BENCH_SPEC + 1
    parent_list = np.stack([draw.beams(rng, BENCH_TOPK, BENCH_DEPTH, BENCH_TOPK * (BENCH_DEPTH - 1) + 1)
                            for _ in range(batch)])
    selected = np.stack([draw.select(rng, row, BENCH_TOPK, nodes - 1, "wide") for row in parent_list])
    seq = bench_lengths(rng, batch)
    return Example("valid", inputs={
        "parent_list": parent_list, "selected_index": selected, "verified_seq_len": seq, "topk": BENCH_TOPK,
        "depth": BENCH_DEPTH, "N": nodes, "tree_mask_mode": oracle.FULL_MASK,
    }, outputs={"tree_mask": Buffer((oracle.mask_length(oracle.FULL_MASK, nodes, seq),), "bool"),
                **draw.index_buffers(batch, nodes)})


def build_worked() -> Example:
    """TopK 2, depth 3, 6 nodes after 10 verified tokens; parent_list[4] = 4 is a kept beam that was not
    selected."""
    return Example("valid", inputs={
        "parent_list": np.array([[-1, 0, 1, 2, 4]], np.int64), "selected_index": np.array([[0, 1, 2, 3, 6]], np.int64),
        "verified_seq_len": np.array([10], np.int64), "topk": 2, "depth": 3, "N": 6, "tree_mask_mode": 1,
    }, outputs={"tree_mask": Buffer((36,), "bool"), **draw.index_buffers(1, 6)})


BUILD_FLOORS = (
    Floor("tree: root only", 6, "TREES.md stress: N = 1, mask [1] and links -1", interpreted=True),
    Floor("tree: chain", 3, "topk = 1: the differential pair with SGLang's build_chain_tree"),
    Floor("tree: star", 2, "depth = 1: every node a child of the root, parent_list unread"),
    Floor("tree: a node grows from the last kept beam (parent_list's last column)", 4,
          "the beam read at group topk*(depth-1), the last a node can name", interpreted=True),
    Floor("tree: two steps of one beam (parent_list of 2 columns), a node under node 1", 2,
          "topk 1, depth 2 (a chain of two drafts): the one parent_list that passes a guard on one column "
          "and still names a parent", interpreted=True),
    Floor("parent_list: no columns", 5, "P may be 0 when depth = 1"),
    Floor("tree: N not a power of two", 10, "the Triton kernel's BLOCK_N tail", interpreted=True),
    Floor("tree: large", 2, "N past 64: the Triton build's rows come in several tiles"),
    Floor("batch: B=0", 8, "B = 0 writes nothing"),
    Floor("batch: B>1", 12, "one Triton program per request; FULL_MASK offsets sum the lengths before",
          interpreted=True),
    Floor("mask: mode 0", 6, "FULL_MASK: only the tree block written, the prefix untouched", interpreted=True),
    Floor("mask: mode 1", 6, "QLEN_ONLY rows", interpreted=True),
    Floor("mask: mode 2", 6, "QLEN_ONLY_BITPACKING rows", interpreted=True),
    Floor("mask: mode 2, rows of 2 or 4 bytes", 4, "W = 2 or 4 bytes for N <= 16, <= 32: bits past byte 0",
          interpreted=True),
    Floor("verified_seq_len: long", 3, "TREES.md stress: long FULL_MASK prefixes"),
    Floor("verified_seq_len: near 2**62", 5, "positions need all 64 bits", tier="hazard", interpreted=True),
)

BUILD = wired(
    name="tree.build",
    doc="the draft tree of an EAGLE top-k search: positions, retrieve links and the attention mask",
    inputs=(
        I("parent_list", "int64", "B, P", strided=True,
          doc="P = topk*(depth-1)+1 (0 or 1 when depth = 1): -1, then the score-list entry of each kept beam"),
        I("selected_index", "int64", "B, N-1", strided=True, doc="the chosen score-list entries, ascending"),
        I("verified_seq_len", "int64", "B", doc="tokens each request has verified (the root's position)"),
        I("topk", "int", doc="beams kept per step (>= 1)"),
        I("depth", "int", doc="draft steps (>= 1)"),
        I("N", "int", doc="nodes per tree, root included: 1..1024 (at most 32 in mode 2)"),
        I("tree_mask_mode", "int", doc="0 FULL_MASK, 1 QLEN_ONLY, 2 QLEN_ONLY_BITPACKING"),
    ),
    outputs=(
        O("tree_mask", "bool|uint8", "M",
          doc="bool in modes 0 and 1, uint8 in mode 2; at least the mode's length; only that region is defined"),
        *index_outputs(),
    ),
    launches={"triton": 3, "torch": 130},
    semantics=(
        "The drafter kept topk beams per step. Its score list has topk entries for step 0 and topk**2 for "
        "each later step (beam j's children of step s start at topk + topk**2*(s-1) + j*topk); parent_list[1 + "
        "topk*s + j] names the entry of the j-th beam kept after step s. Node 0 is the root; node i >= 1 is "
        "entry e = selected_index[b, i-1]. Its parent is the root when e // topk == 0, else the node whose "
        "entry equals parent_list[b, e // topk] (the lowest such; it must exist and come before i). "
        "positions[b*N + i] = verified_seq_len[b] + depth(i) (the root has depth 0); retrieve_index[b, i] = "
        "b*N + i; retrieve_next_token[b, i] is i's lowest-numbered child and retrieve_next_sibling[b, i] the "
        "next higher-numbered child of i's parent, -1 where none (the root never has a sibling). Every "
        "element of these four is written: nothing relies on a -1 the caller put there. Mask row i has a 1 "
        "at column 0, at i and at each ancestor of i, 0 at the other tree columns. QLEN_ONLY (mode 1): row i "
        "at N*N*b + N*i, the whole B*N*N written. FULL_MASK (mode 0): row i at N*N*b + N*sum(seq[:b]) + "
        "(seq[b] + N)*i; its first seq[b] columns (the prefix) are not written, the N tree columns follow. "
        "QLEN_ONLY_BITPACKING (mode 2): row i in W bytes (W = 1, 2, 4 for N <= 8, 16, 32) at (b*N + i)*W, "
        "bit j of the little-endian row is column j; every byte of those rows is written (no OR into what "
        "was there). Mask elements past the mode's length are never written; offsets are 64-bit."
    ),
    tiers={
        "valid": "A beam search drawn step by step: topk, depth, the beams kept after each step in a random "
                 "rank order, then an ascending choice of N-1 entries whose beams are all chosen; the root "
                 "alone, chains (topk 1), stars (depth 1), bushy and deep trees, N not a power of two up to "
                 "1024, B = 0, all three modes, FULL_MASK prefixes of up to 20000 tokens, strided inputs, "
                 "masks longer than needed.",
        "hazard": "The same trees after lengths just below 2**62 in modes 1 and 2 (positions need 64 bits); "
                  "checked against the contract's outputs.",
        "invalid": "A beam that is not selected, a parent after its child, an entry past the score list, "
                   "rows not strictly increasing, N outside 1..1024 or above 32 in mode 2, an unknown mode, "
                   "topk 0, parent_list of the wrong width, a mask shorter than the mode needs, a negative "
                   "length.",
    },
    bench=build_bench,
    floors=BUILD_FLOORS,
    # SGLang's caller chooses FULL_MASK or QLEN_ONLY (its mask-size helper raises for any other mode); an engine
    # sizes its trees (N) and draft steps (depth) by its speculative settings
    choices={"tree_mask_mode": oracle.MODES},
    bounded={"N": 1, "depth": 1},
    domain_problem=draw.build_domain_problem,
)


def reconstruct_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: B trees of BENCH_SPEC drafts (random parents), the ancestor masks of n-gram verification."""
    nodes = BENCH_SPEC + 1
    mask = np.concatenate([draw.closed_mask(draw.forest_parents(rng, nodes, 0.0)).reshape(-1)
                           for _ in range(batch)] + [np.zeros(0, bool)])
    return Example("valid", inputs={"tree_mask": mask, "verified_seq_len": bench_lengths(rng, batch), "N": nodes},
                   outputs=draw.index_buffers(batch, nodes))


def reconstruct_from_mask_worked() -> Example:
    """The forest of TREES.md: roots 0 and 2 (never siblings of each other), 5 verified tokens."""
    rows = ["100000", "110000", "001000", "110100", "001010", "100001"]
    mask = np.array([c == "1" for r in rows for c in r])
    return Example("valid", inputs={"tree_mask": mask, "verified_seq_len": np.array([5], np.int64), "N": 6},
                   outputs=draw.index_buffers(1, 6))


RECONSTRUCT_FLOORS = (
    Floor("tree: N=1", 3, "TREES.md stress: N in {1, 2, 3, 7, ...}", interpreted=True),
    Floor("tree: N not a power of two", 12, "non-powers of two exercise the Triton BLOCK_N tail", interpreted=True),
    Floor("tree: N > 64 (several row tiles)", 4, "N = 65 and 128: past one tile of 64 nodes, the Triton kernel's "
          "rows come in several tiles", interpreted=True),
    Floor("tree: N > 64, B > 1 (requests' scratch rows side by side)", 1, "the Triton kernel keeps each request's "
          "parents in a scratch row: a lane past N reads the next request's row", interpreted=True),
    Floor("batch: B=0", 8, "B = 0 writes nothing"),
    Floor("batch: B>1", 12, "one Triton program per request", interpreted=True),
    Floor("mask: two or more roots", 12, "forests: roots never link as siblings", interpreted=True),
    Floor("mask: diagonal none", 12, "masks without a diagonal"),
    Floor("mask: diagonal random", 10, "the diagonal is ignored"),
    Floor("mask: upper garbage", 15, "garbage above the diagonal is ignored"),
    Floor("mask: any", 6, "any bool mask is valid tier, not only ancestor-closed ones"),
    Floor("mask: two or more roots", 3, "lengths near 2**62 over forests", tier="hazard"),
)

RECONSTRUCT = wired(
    name="tree.reconstruct_from_mask",
    doc="positions and retrieve links of each request's tree from its ancestor mask",
    inputs=(
        I("tree_mask", "bool", "M", doc="at least B*N*N: element (b*N + i)*N + j says j is an ancestor of i"),
        I("verified_seq_len", "int64", "B", doc="tokens each request has verified"),
        I("N", "int", doc="nodes per tree: 1..1024"),
    ),
    outputs=index_outputs(),
    launches={"triton": 1, "torch": 40},
    semantics=(
        "Only the mask below the diagonal is read: A(i) = {j < i : mask[b, i, j]}. positions[b*N + i] = "
        "verified_seq_len[b] + |A(i)|; retrieve_index[b, i] = b*N + i; next_token[b, i] = the lowest k > i "
        "whose row marks i, else -1; with parent(i) = max A(i) (none when A(i) is empty), next_sibling[b, i] "
        "= the lowest k > i with parent(k) == parent(i), else -1, and -1 for every node without a parent "
        "(roots never link as siblings). These formulas hold for any mask, a forest's or not. Every element "
        "of the four outputs is written."
    ),
    tiers={
        "valid": "Ancestor-closed forests with about 30 % roots, single trees and arbitrary lower triangles; "
                 "with no diagonal, a set one or a random one; zero or random bits above the diagonal; N in "
                 "1, 2, 3, 7, 8, 16, 17, 32, 63, 64 and 128, B in 0, 1, 3, 16, 64 (at the Triton interpreter's sizes "
                 "N up to 65, B at most 3: N = 65 with B = 1 or 3 among them); masks longer than B*N*N.",
        "hazard": "The same masks after lengths just below 2**62; checked against the contract's outputs.",
        "invalid": "N outside 1..1024, a mask shorter than B*N*N, a negative length.",
    },
    bench=reconstruct_bench,
    floors=RECONSTRUCT_FLOORS,
)


def pack_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: the FULL_MASK of B trees of BENCH_SPEC drafts after 64 to 1024 tokens (kv_len = seq + N)."""
    nodes = BENCH_SPEC + 1
    lengths = bench_lengths(rng, batch) + nodes
    kv_indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    packed_indptr = np.concatenate([[0], np.cumsum(-(-nodes * lengths // 8))]).astype(np.int32)
    return Example("valid", inputs={"mask": rng.random(nodes * int(kv_indptr[-1])) < 0.9, "kv_indptr": kv_indptr,
                                    "packed_indptr": packed_indptr, "Q": nodes, "max_kv_len": int(lengths.max())},
                   outputs={"packed": Buffer((int(packed_indptr[-1]),), "uint8")})


def pack_mask_worked() -> Example:
    """Two requests of Q = 2 rows: 6 bits into one byte, 10 bits into two; the fourth byte is untouched."""
    mask = np.array([1, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1], bool)
    return Example("valid", inputs={"mask": mask, "kv_indptr": np.array([0, 3, 8], np.int32),
                                    "packed_indptr": np.array([0, 1, 3], np.int32), "Q": 2, "max_kv_len": 5},
                   outputs={"packed": Buffer((4,), "uint8")})


PACK_FLOORS = (
    Floor("Q=1", 8, "TREES.md stress: Q = 1"),
    Floor("batch: B=0", 4, "B = 0 writes nothing"),
    Floor("batch: B>1", 15, "one Triton program per request and byte block", interpreted=True),
    Floor("segments: a bit count not a multiple of 8", 12, "the last byte's high bits are written as 0",
          interpreted=True),
    Floor("segments: one of kv_len 0 among others", 4, "kv_len 0 writes nothing", interpreted=True),
    Floor("segments: more than 2048 bits (several programs)", 8, "segments past one 256-byte program",
          interpreted=True),
    Floor("packed_indptr: gaps between segments", 15, "bytes outside the segments stay untouched"),
    Floor("packed_indptr: gaps between segments", 3, "a grid far wider than the segments writes no gap",
          tier="hazard"),
)

PACK = wired(
    name="tree.pack_mask",
    doc="bit-pack each request's Q x kv_len mask segment into bytes (little endian within a byte)",
    inputs=(
        I("mask", "bool", "M", doc="request r's Q*kv_len bits start at element Q*kv_indptr[r]"),
        I("kv_indptr", "int32", "B+1", doc="exclusive offsets of the KV lengths, from 0, non-decreasing"),
        I("packed_indptr", "int32", "B+1", doc="byte offset of each request's packed segment"),
        I("Q", "int", doc="rows per request (the tree's N), >= 1"),
        I("max_kv_len", "int", doc="at least every kv_len (sizes the launch grid)"),
    ),
    outputs=(O("packed", "uint8", "PB", doc="at least packed_indptr[B] bytes; only the segments are defined"),),
    launches={"triton": 1, "torch": 40},
    semantics=(
        "Request r has count = Q*(kv_indptr[r+1] - kv_indptr[r]) bits, from mask element Q*kv_indptr[r]. "
        "For each k < ceil(count / 8), packed[packed_indptr[r] + k] = sum over b < 8 of bit 8k + b shifted "
        "left by b, a bit at or past count counting as 0 (so the last byte's high bits are written as 0): "
        "NumPy's packbits with bitorder 'little' per segment. Segments may not overlap (each needs "
        "ceil(count / 8) bytes before the next offset) and no kv_len may exceed max_kv_len. Bytes outside "
        "the segments (gaps, the tail) are not written."
    ),
    tiers={
        "valid": "B from 0, Q in 1, 2, 3, 6, 8, 16; short ragged segments (bit counts not a multiple of 8), "
                 "empty ones, segments past 2048 bits, a mix; gaps between segments and a leading one; "
                 "max_kv_len at or above the longest; all-zero, all-one and random bits; a mask and an output "
                 "longer than needed.",
        "hazard": "A grid thousands of columns wider than any segment, every segment empty; checked against "
                  "NumPy's packbits.",
        "invalid": "Offsets not starting at 0 or decreasing, overlapping output segments, a segment longer "
                   "than max_kv_len, a mask or output too short, Q 0.",
    },
    bench=pack_bench,
    floors=PACK_FLOORS,
)


# ---------------------------------------------------------------- tree verification: shared pieces

f32, i64 = np.float32, np.int64

TREE_FIELDS = (
    I("candidates", "int64", "B, N", doc="the token of each node (column 0: the root's); any value, -1 included"),
    I("retrieve_index", "int64", "B, N", doc="each node's flat slot in [0, B*N): where its outputs go"),
    I("retrieve_next_token", "int64", "B, N", doc="each node's first child, -1: none"),
    I("retrieve_next_sibling", "int64", "B, N", doc="the next node of the same child list, -1: the list ends"),
)
RESULT_FIELDS = (
    O("predicts", "int32", "B*N",
      doc="the token emitted after each path node, at that node's slot; other slots untouched"),
    O("accept_index", "int32", "B, S", doc="[b, 0..n]: the slots of the path, root first; later columns untouched"),
    O("accept_token_num", "int32", "B", doc="n: the drafts accepted in each request (0 .. S-1)"),
)
LINKS_RULE = """\
Links: node i's children are retrieve_next_token[b, i], then retrieve_next_sibling of that node, and so
on until -1, in that order (node numbers need not ascend). The links must form a forest: values in
[-1, N), no node the target of two links, no walk along them that returns to a node. The root's own
sibling link is never followed."""
TREE_INVALID = ("One rule broken: a link outside [-1, N), a cycle of links, a node linked to twice, a slot "
                "outside [0, B*N), S = 0, a wrong dtype or a predicts buffer of the wrong length")
TREE_VALID = ("Trees of these shapes: k-ary, irregular, star, chain, depth 1, root only and padded "
              "(unused nodes, detached trees, one hung on the root's sibling link); child lists ascending, "
              "descending or shuffled; nodes renumbered; N from 1 to 100, non-powers of two around the tile "
              "edges; B from 0 (up to 64); S equal to the depth + 1, 1, 2 or beyond the depth.")


def verify_greedy_worked() -> Example:
    """Request 0: two siblings carry the predicted 7; the first (node 1) wins although node 2's subtree
    would match two more levels. Request 1: a star whose last sibling matches."""
    return Example("valid", inputs={
        "candidates": np.array([[9, 7, 7, 4, 5, 3], [2, 1, 2, 3, 4, 5]], i64),
        "retrieve_index": np.arange(12, dtype=i64).reshape(2, 6),
        "retrieve_next_token": np.array([[1, 3, 4, -1, 5, -1], [1, -1, -1, -1, -1, -1]], i64),
        "retrieve_next_sibling": np.array([[-1, 2, -1, -1, -1, -1], [-1, 2, 3, 4, 5, -1]], i64),
        "target_predict": np.array([[7, 5, 5, 1, 3, 6], [5, 0, 0, 0, 0, 0]], i64),
    }, outputs=draw.outputs(2, 6, 4))


def bench_tree(batch: int, rng: np.random.Generator) -> dict:
    """An irregular tree of N = BENCH_SPEC nodes per request (ascending lists): the root and BENCH_SPEC - 1
    drafts, so a per-node table has BENCH_SPEC rows per request, as the chain stages' tables have."""
    n = BENCH_SPEC
    token, sibling, parent = (np.zeros((batch, n), i64) for _ in range(3))
    for b in range(batch):
        parent[b] = parents("irregular", n, rng, 2)
        token[b], sibling[b] = links(parent[b], "ascending", rng)
    return {"retrieve_index": np.arange(batch * n, dtype=i64).reshape(batch, n), "retrieve_next_token": token,
            "retrieve_next_sibling": sibling, "parent": parent, "spec": int(max(depths(p).max() for p in parent)) + 1
            if batch else 1}


def greedy_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: `bench_tree`'s trees; each draft carries its parent's prediction with probability 0.7
    (else another id in [0, V))."""
    tree = bench_tree(batch, rng)
    n = BENCH_SPEC
    predict = rng.integers(0, vocab, (batch, n)).astype(i64)
    parent_predict = np.take_along_axis(predict, np.maximum(tree["parent"], 0), 1)
    other = (parent_predict + rng.integers(1, max(vocab, 2), (batch, n))) % max(vocab, 2)
    candidates = np.where(rng.random((batch, n)) < 0.7, parent_predict, other).astype(i64)
    return Example("valid", inputs={
        "candidates": candidates, "retrieve_index": tree["retrieve_index"],
        "retrieve_next_token": tree["retrieve_next_token"], "retrieve_next_sibling": tree["retrieve_next_sibling"],
        "target_predict": predict}, outputs=draw.outputs(batch, n, tree["spec"]))


GREEDY_SEMANTICS = f"""\
{LINKS_RULE}

Per request b, with pred(x) = target_predict[x // N, x % N] (read by flat slot): the path starts at
the root, node 0. At most S - 1 times: among the children of the path's last node, in list order, take
the first whose candidate equals pred(retrieve_index[b, last]); none: stop. The walk never goes back
to try a later sibling. With the path's nodes v_0 = 0, ..., v_n: accept_index[b, k] =
retrieve_index[b, v_k] and predicts[retrieve_index[b, v_k]] = pred(retrieve_index[b, v_k]) for
k = 0..n (the last is the bonus token), accept_token_num[b] = n. A candidate that is no prediction
(-1, negative, >= 2**31) never matches. Nothing else is written: other predicts slots, accept_index[b,
n+1..] and all inputs stay as they were.

Invalid: {TREE_INVALID}, target_predict outside [0, 2**31)."""

LONGEST_RULE = """\
- the accepted path is a deepest one among the root paths whose every step matches (a child whose
  candidate is pred at its parent's slot), its depth capped at S - 1; of several equally deep, the one
  that comes first in preorder, each child list in list order (the first root-to-leaf path of that
  matched length when root-to-leaf paths are listed depth first, a strictly longer one replacing the
  best: TensorRT-LLM's static-tree rule). Outputs are written as by the record's rule."""


def verify_greedy_longest_path_worked() -> Example:
    """The record's example under the longest-path rule: request 0 takes 0-2-4-5 (3 accepted)."""
    return verify_greedy_worked()


GREEDY_FLOORS = (
    Floor("tree: N=1", 2, "TREES.md stress: N = 1, only predicts[b] = tp(b)"),
    Floor("S: one", 3, "TREES.md stress: S = 1 walks no level"),
    Floor("S: beyond", 4, "TREES.md stress: S beyond the tree's depth", interpreted=True),
    Floor("tree: star", 5, "TREES.md stress: star, the match at the last of N-1 siblings"),
    Floor("tree: chain", 5, "TREES.md stress: chain"),
    Floor("tree: padded", 6, "placeholder nodes: unused, or a detached tree no walk reaches"),
    Floor("tree: siblings descending", 6, "lists need not ascend (the upstream fixture lists node 4 first)"),
    Floor("tree: siblings shuffled", 8, "lists in any order of node numbers"),
    Floor("tree: N not a power of two", 15, "TREES.md stress: N not a power of two", interpreted=True),
    Floor("batch: B=0", 5, "TREES.md stress: B = 0"),
    Floor("batch: B=0 with N=0", 3, "[0, 0] trees: the checks ask a root only of a request"),
    Floor("tree: the root in the child list of a node outside its tree", 3,
          "the root heads its tree whatever links to it (a stale link from a node no walk reaches)", interpreted=True),
    Floor("batch: B>1", 20, "one Triton program per request, slots b*N + i", interpreted=True),
    Floor("walk: 2 or more drafts accepted", 8, "each level matches the prediction at the last accepted node",
          interpreted=True),
    Floor("walk: 4 or more drafts accepted", 5, "deep paths: accept_index and predicts far down the tree"),
    Floor("walk: accepts a sibling after the first", 8, "the sibling list is walked until a match"),
    Floor("walk: several siblings match, the first listed wins", 5, "tie rule: the first match in list order",
          interpreted=True),
    Floor("walk: the first listed match is not the lowest-numbered", 4, "list order, not node order, breaks ties"),
    Floor("walk: cut at S - 1 with a match below", 3, "at most S - 1 levels", interpreted=True),
    Floor("walk: a negative candidate in a scanned list", 3, "-1 and negative candidates never match (valid tier)",
          interpreted=True),
    Floor("walk: an int32 alias in a scanned list", 2, "a candidate equal to a prediction only in int32 never "
          "matches", interpreted=True),
    Floor("target_predict: largest", 4, "predictions up to 2**31 - 1, stored as int32"),
    Floor("walk: 1 or more drafts accepted", 5, "permuted retrieve_index: slots read through it",
          tier="hazard", interpreted=True),
    Floor("walk: 2 or more drafts accepted", 2, "permuted slots below the first level", tier="hazard"),
)

VERIFY_GREEDY = wired(
    name="tree.verify_greedy",
    doc="greedy tree verification: descend through the first child carrying the target's prediction",
    inputs=TREE_FIELDS + (
        I("target_predict", "int64", "B, N",
          doc="the target's argmax after each node, read by flat slot; in [0, 2**31)"),),
    outputs=RESULT_FIELDS,
    rows=draw.tree_table,
    launches={"triton": 1, "torch": 700},   # longest_path marks ancestors one level per round
    bench=greedy_bench,
    floors=GREEDY_FLOORS,
    semantics=GREEDY_SEMANTICS,
    tiers={
        "valid": TREE_VALID + " Candidates carry their parent's prediction at rates from 0.3 to 1 (so "
                 "matching siblings, duplicates, are common), else another id, -1, -5 or the prediction "
                 "+ 2**32 (equal once truncated to int32); predictions small, wide or just below 2**31; "
                 "retrieve_index[b, i] = b*N + i.",
        "hazard": "Valid draws with retrieve_index a random permutation of the B*N slots. Checked: each "
                  "request's outputs are one matching root path (n in [0, S-1], its slots, the prediction "
                  "at each, the tail untouched).",
        "invalid": TREE_INVALID + ", a prediction of -1 or 2**31.",
    },
    dialects={"longest_path": Dialect(
        doc="TensorRT-LLM's static-tree rule: the longest matching root path, the first in preorder among equals",
        rule=LONGEST_RULE, words="longest matching path", oracle=oracle.verify_longest_path,
        worked=verify_greedy_longest_path_worked,
        impls=kernels("tree", "verify_longest_path"))},
)


# ---------------------------------------------------------------- tree.sample_target_only

TARGET_ROWS = np.array([[.125, .25, .5, .125], [.5, .25, .125, .125], [.25, .25, .25, .25],
                        [.375, .125, .25, .25]], f32)


def sample_target_only_worked() -> Example:
    """Tree 0 -> {1, 2}, 1 -> {3}, tokens [9, 2, 1, 0], both requests. Request 0 rejects both children
    (coin .875 against masses .5 and .75) and picks 3 from the residual; request 1 rejects node 1 at a
    tie (coin .5 == mass .5), accepts node 2 and, node 2 being a leaf, picks 1 from its row."""
    return Example("valid", inputs={
        "candidates": np.array([[9, 2, 1, 0]] * 2, i64), "retrieve_index": np.arange(8, dtype=i64).reshape(2, 4),
        "retrieve_next_token": np.array([[1, 3, -1, -1]] * 2, i64),
        "retrieve_next_sibling": np.array([[-1, 2, -1, -1]] * 2, i64),
        "uniform_samples": np.array([[.875, .5, .5, .5], [.5, .25, .75, .5]], f32),
        "uniform_final": np.array([.5, .25], f32), "target_probs": np.stack([TARGET_ROWS, TARGET_ROWS]),
        "draft_probs": np.zeros((2, 4, 4), f32), "threshold_single": 1.0, "threshold_acc": 1.0,
    }, outputs=draw.outputs(2, 4, 3))


def sample_target_only_le_worked() -> Example:
    """The record's example under `le`: request 1's tie accepts node 1, then node 3 (coin .25 < .5),
    and the bonus comes from node 3's row: 0."""
    return sample_target_only_worked()


def sample_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: `bench_tree`'s trees; target rows a softmax of N(0, 3^2) logits floored to the 2**-16
    grid, what flooring lost added to the top token (each row sums to 1 exactly); each draft drawn from
    its parent's row; zero draft_probs; thresholds (1, 1)."""
    tree = bench_tree(batch, rng)
    n = BENCH_SPEC
    logits = rng.standard_normal((batch, n, vocab)) * 3
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs = bench.on_grid(probs / probs.sum(-1, keepdims=True))
    parent_rows = probs[np.arange(batch)[:, None], np.maximum(tree["parent"], 0)]
    cdf = np.cumsum(parent_rows.astype(np.float64), -1)
    candidates = np.minimum((cdf < rng.random((batch, n, 1)) * cdf[..., -1:]).sum(-1), vocab - 1).astype(i64)
    return Example("valid", inputs={
        "candidates": candidates, "retrieve_index": tree["retrieve_index"],
        "retrieve_next_token": tree["retrieve_next_token"], "retrieve_next_sibling": tree["retrieve_next_sibling"],
        "uniform_samples": (rng.integers(0, 256, (batch, n)) * draw.COARSE).astype(f32),
        "uniform_final": (rng.integers(0, 256, batch) * draw.COARSE).astype(f32), "target_probs": probs,
        "draft_probs": np.zeros_like(probs), "threshold_single": 1.0, "threshold_acc": 1.0,
    }, outputs=draw.outputs(batch, n, tree["spec"]))


SAMPLE_SEMANTICS = f"""\
{LINKS_RULE}

Per request b, with acc = max(f32(threshold_acc), 1e-9) and single = f32(threshold_single): the path
starts at the root (node 0). While it has fewer than S nodes, with r its last node, coin =
uniform_samples[b, r] (indexed by node, not by depth) and mass = 0 (f32), the children of r are tried
in list order. A child c whose candidate x is not in [0, V) is rejected unread. Otherwise p =
target_probs[b, r, x], mass = f32(mass + p), and c is accepted iff p > 0 and (coin < f32(mass / acc),
one IEEE division, or p >= single): c joins the path and predicts[retrieve_index[b, r]] = x. A rejected
child writes draft_probs[b, r, x] = p. If no child is accepted the walk ends.

Then accept_token_num[b] = n (the path's nodes minus one) and, with r the path's last node, the
residual res = target_probs[b, r] when n = S - 1, else the clamp at 0 of
f32(target_probs[b, r] - draft_probs[b, r]) (draft_probs after this call's writes). t = f32(uniform_final[b] * sum(res)); the bonus is the lowest
v with res[v] > 0 whose running sum is > t, else the largest v with res[v] > 0, else V - 1, written to
predicts[retrieve_index[b, r]]. accept_index[b, k] = the slot of the path's node k, k = 0..n.

Ties: coin == mass / acc rejects, p == single accepts, t equal to a running sum moves on to the next
positive entry. Duplicate tokens among siblings each add their p to the mass. Untouched: every other
predicts slot, accept_index[b, n+1..], every draft_probs cell but the rejected children's, all other
inputs.

Invalid: {TREE_INVALID}, S > N, a threshold outside [0, 1], shapes that disagree (uniform_samples
[B, N], uniform_final [B], target_probs and draft_probs [B, N, V]), float64 uniforms."""

LE_RULE = """\
- a child with candidate x in [0, V) is accepted iff coin <= f32(mass / acc) or p >= single: a coin
  equal to the mass accepts, and there is no p > 0 test (a zero-mass child is accepted when the coin is
  0, or at once when threshold_single is 0). Everything else is the record's rule (sgl-kernel before
  its fix of the tie and zero-mass rule, and the Triton port of that era)."""


SAMPLE_FLOORS = (
    Floor("coins: ties with a sibling's mass", 8, "coin == mass rejects (half-open buckets, PR #35798)",
          interpreted=True),
    Floor("thresholds: lossless", 6, "(1, 1): the lossless rule"),
    Floor("thresholds: zero", 3, "(0, 0): the old upstream fixture, every first sibling of positive mass"),
    Floor("thresholds: single", 2, "p >= threshold_single accepts"),
    Floor("thresholds: acc", 3, "threshold_acc < 1 scales the mass up"),
    Floor("candidates: duplicates", 8, "a duplicated token adds its p to the mass again"),
    Floor("candidates: placeholders", 2, "-1 is rejected unread, with no draft_probs write"),
    Floor("candidates: oov", 3, "ids >= V are rejected unread (engines read past the row)"),
    Floor("draft_probs on entry: residue", 4, "only rejected siblings' cells are written"),
    Floor("walk: 2 or more drafts accepted", 5, "coins indexed by node, not by depth", interpreted=True),
    Floor("walk: all S - 1 levels accepted", 3, "the bonus from the last node's row, no draft_probs subtracted"),
    Floor("walk: a rejected sibling writes draft_probs", 3, "draft_probs[b, row, x] = p for rejected siblings",
          interpreted=True),
    Floor("pick: an all-zero residual (V - 1)", 5, "an all-zero residual gives V - 1", interpreted=True),
    Floor("vocab: V > 1024 (several residual tiles)", 2, "the Triton sampler's residual spans tiles of 1024"),
    Floor("vocab: V=1", 3, "a vocabulary of one token"),
    Floor("tree: N=1", 2, "N = 1: only the pick"),
    Floor("tree: the root in the child list of a node outside its tree", 3,
          "the root heads its tree whatever links to it (a stale link from a node no walk reaches)"),
    Floor("tree: the root a later child of a node outside its tree", 3,
          "the root is a sibling's successor: the running mass of the owner's list passes through it"),
    Floor("batch: B>1", 20, "one Triton program per request", interpreted=True),
    Floor("layout: strided", 20, "strided uniform_samples, target_probs and draft_probs", interpreted=True),
    Floor("hazard: nan", 1, "a NaN p makes the mass NaN", tier="hazard"),
    Floor("hazard: zero rows", 1, "all-zero rows: the pick V - 1", tier="hazard"),
    Floor("walk: 1 or more drafts accepted", 2, "general floats along an accepted path", tier="hazard"),
)

SAMPLE_TARGET_ONLY = wired(
    name="tree.sample_target_only",
    doc="tree rejection sampling against the target: siblings share one coin, the bonus from the residual by CDF",
    inputs=TREE_FIELDS + (
        I("uniform_samples", "float32", "B, N", strided=True,
          doc="the coin for the children of each node, indexed by node"),
        I("uniform_final", "float32", "B", doc="the uniform the bonus pick uses"),
        I("target_probs", "float32", "B, N, V", strided=True, doc="the target's distribution after each node"),
        I("draft_probs", "float32", "B, N, V", strided=True, inout=True,
          doc="mass removed from each node's row; rejected children's cells written (zero on entry in use)"),
        I("threshold_single", "float", doc="accept a child whose p reaches it; in [0, 1] (1: lossless)"),
        I("threshold_acc", "float", doc="the running mass is divided by max(it, 1e-9); in [0, 1] (1: lossless)"),
    ),
    outputs=RESULT_FIELDS,
    rows=draw.tree_table,
    launches={"triton": 1, "torch": 300},
    bench=sample_bench,
    floors=SAMPLE_FLOORS,
    classes={"oov_candidates": ("candidates", "oov")},
    semantics=SAMPLE_SEMANTICS,
    tiers={
        "valid": TREE_VALID + " S <= N. V from 1 to 8193; target rows on the 2**-16 (or 2**-8) grid with "
                 "sums <= 1 and 0, 50 or 90 % zeros; draft_probs zero on entry or holding grid values; "
                 "candidates drawn from the parent's row, uniform, duplicated from a sibling, -1 or out of "
                 "the vocabulary; thresholds (1, 1), (0, 0) and others, threshold_single often equal to a "
                 "probability present; coins on the 2**-8 grid or equal to a sibling's exact mass / acc "
                 "(ties); uniform_final on the 2**-8 grid; strided uniforms and tables.",
        "hazard": "General float rows (normalised or not) and uniforms, with NaN, inf, negative cells or "
                  "all-zero rows planted. Checked: one root path per request, its tokens the path nodes' "
                  "candidates, the bonus in [0, V), the tail untouched, draft_probs changed only at a "
                  "child's token of a path node, to the target's value there.",
        "invalid": TREE_INVALID + ", S = N + 1, thresholds 1.5 and -0.25, uniform_final of B + 1, "
                   "float64 uniforms, draft_probs of V = 0.",
    },
    dialects={"le": Dialect(
        doc="the older acceptance test: coin <= mass / acc (ties accept), no p > 0 test",
        rule=LE_RULE, words="ties accept: coin <= mass / acc", oracle=oracle.sample_target_only_le,
        worked=sample_target_only_le_worked,
        impls=kernels("tree", "sample_target_only_le"))},
    randomness=Randomness(("uniform_samples", "uniform_final"), None, panels.target_only_launch,
                          panels.predicts_emitted, one_hot=True, flat={"predicts": "candidates"}),
)

STAGES = (BUILD, RECONSTRUCT, PACK, VERIFY_GREEDY, SAMPLE_TARGET_ONLY)
