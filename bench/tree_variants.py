"""Candidate variants of our Triton `tree.reconstruct_from_mask` kernel timed beside SGLang's launch shape
(bench/tree_shapes.py's references), for issue 31's rows still 1-4 % above it: reconstruct's one-tile kernel with
its offsets in int64 at every size (`i64`, the kernel before "ours" took int32 below 2**31 mask elements), and an
A/A control for both stages (the reference timed in our column, so its ratio shows the method's
own bias). Each variant's outputs are compared byte for byte with the reference's before timing (`byte_equal`).

    OUT=/tmp/out PYTHONPATH=. python bench/tree_variants.py

Writes $OUT/tree_variants.json and prints one JSON row per (stage, B, variant). Needs a CUDA device."""
import sys

sys.path.insert(0, "bench")
import torch

import engine_shapes
import tree_shapes
from specverify.kernels.triton import tree
from specverify.kernels.triton.launch import next_power_of_2


def rec_variant(wide):
    """Our one-tile reconstruct with its offsets in int64 (`wide`) or int32 whatever the size."""
    def call(**kw):
        n = kw["N"]
        block = next_power_of_2(n)
        batch = kw["verified_seq_len"].shape[0]
        tree.reconstruct_tile_kernel[(batch,)](
            kw["tree_mask"].view(torch.uint8), kw["verified_seq_len"], kw["positions"], kw["retrieve_index"],
            kw["retrieve_next_token"], kw["retrieve_next_sibling"], N=n, BLOCK_N=block, WIDE=wide,
            num_warps=tree.warps_for(block))
    return call


VARIANTS = {
    "tree.reconstruct_from_mask": {
        "ours": tree.reconstruct_from_mask,
        "i64": rec_variant(True),
        "aa_control": engine_shapes.same_as_reference(tree_shapes.reconstruct_reference),
    },
    "tree.pack_mask": {
        "ours": tree.pack_mask,
        "aa_control": engine_shapes.same_as_reference(tree_shapes.pack_reference),
    },
}


if __name__ == "__main__":
    sys.exit(engine_shapes.sweep(VARIANTS, tree_shapes.CASES, "tree_variants"))
