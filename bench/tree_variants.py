"""Candidate variants of our Triton `tree.reconstruct_from_mask` kernel timed beside SGLang's launch shape
(bench/tree_shapes.py's references), for issue 31's rows still 1-4 % above it: reconstruct with every offset in
int32, and an A/A control for both stages (the reference timed in our column, so its ratio shows the method's
own bias). Each variant's outputs are compared byte for byte with the reference's before timing (`byte_equal`).

    OUT=/tmp/out PYTHONPATH=. python bench/tree_variants.py

Writes $OUT/tree_variants.json and prints one JSON row per (stage, B, variant). Needs a CUDA device."""
import sys

sys.path.insert(0, "bench")
import torch
import triton
import triton.language as tl

import engine_shapes
import tree_shapes
from specverify.kernels.triton import tree
from specverify.kernels.triton.launch import next_power_of_2


@triton.jit
def rec_i32(mask_ptr, seq_ptr, pos_ptr, ri_ptr, nt_ptr, ns_ptr, N: tl.constexpr, BLOCK_N: tl.constexpr):
    """Ours with every offset in int32 (the program id too): right only while B * N * N < 2**31."""
    b = tl.program_id(0)
    node = tl.arange(0, BLOCK_N)
    rows, cols = node[:, None], node[None, :]
    marked = tl.load(mask_ptr + b * N * N + rows * N + cols, mask=(rows < N) & (cols < N), other=0) != 0
    below = marked & (cols < rows)
    depth = tl.sum(below.to(tl.int32), axis=1)
    parent = tl.max(tl.where(below, cols, -1), axis=1)
    first_child = tl.min(tl.where(below, rows, BLOCK_N), axis=0)
    kin = (parent[:, None] == parent[None, :]) & (parent[None, :] >= 0) & (rows > cols) & (rows < N)
    sibling = tl.min(tl.where(kin, rows, BLOCK_N), axis=0)
    live = node < N
    flat = b * N + node
    tl.store(pos_ptr + flat, tl.load(seq_ptr + b) + depth, mask=live)
    tl.store(ri_ptr + flat, flat.to(tl.int64), mask=live)
    tl.store(nt_ptr + flat, tl.where(first_child == BLOCK_N, -1, first_child).to(tl.int64), mask=live)
    tl.store(ns_ptr + flat, tl.where(sibling == BLOCK_N, -1, sibling).to(tl.int64), mask=live)


def rec_variant(kernel):
    def call(**kw):
        n = kw["N"]
        block = next_power_of_2(n)
        batch = kw["verified_seq_len"].shape[0]
        kernel[(batch,)](kw["tree_mask"].view(torch.uint8), kw["verified_seq_len"], kw["positions"],
                         kw["retrieve_index"], kw["retrieve_next_token"], kw["retrieve_next_sibling"], N=n,
                         BLOCK_N=block, num_warps=tree.warps_for(block))
    return call


VARIANTS = {
    "tree.reconstruct_from_mask": {
        "ours": tree.reconstruct_from_mask,
        "i32": rec_variant(rec_i32),
        "aa_control": engine_shapes.same_as_reference(tree_shapes.reconstruct_reference),
    },
    "tree.pack_mask": {
        "ours": tree.pack_mask,
        "aa_control": engine_shapes.same_as_reference(tree_shapes.pack_reference),
    },
}


if __name__ == "__main__":
    sys.exit(engine_shapes.sweep(VARIANTS, tree_shapes.CASES, "tree_variants"))
