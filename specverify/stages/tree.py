"""Stage records of the `tree` family: the draft token tree's indices and masks (EAGLE top-k trees).

Where the sources are silent (see `specverify.oracles.tree`): `tree.build` takes N as a scalar and
checks every shape against it; lengths are in [0, 2**62); FULL_MASK writes only the tree blocks;
`tree.pack_mask` allows a leading gap before the first output segment.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles import tree as oracle
from specverify.records.stage import BENCH_SPEC, Buffer, Example, I, O
from specverify.records.wiring import wired
from specverify.strategies import tree as draw

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
                 "1, 2, 3, 7, 8, 16, 17, 32, 63, 64 (and 128), B in 0, 1, 3, 16, 64; masks longer than B*N*N.",
        "hazard": "The same masks after lengths just below 2**62; checked against the contract's outputs.",
        "invalid": "N outside 1..1024, a mask shorter than B*N*N, a negative length.",
    },
    bench=reconstruct_bench,
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
)

STAGES = (BUILD, RECONSTRUCT, PACK)
