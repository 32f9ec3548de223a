"""Candidate variants of our Triton tree and KV kernels timed beside SGLang's launch shape (bench/tree_shapes.py's
references), for issue 31's rows at or just above it:

- reconstruct_from_mask: its one-tile kernel with int64 offsets at every size (`i64`; ours takes int32 below
  2**31 mask elements);
- pack_mask: int64 first-bit and first-byte offsets at every size (`i64`: ours takes int32 while no offset can
  reach 2**31), and ours at 1 or 2 warps a program (`w1`, `w2`; ours takes 4 while the grid fits the GPU at once);
- assign_req_to_token: the prefix of earlier lengths summed in a loop of one step (`loop`, the kernel before ours
  took one load when B <= 1024), and ours with 1, 2 or 8 requests a program (`r1`, `r2`, `r8`) or 2 warps (`w2`).

Every stage has an A/A control (the reference timed in our column, so its ratio shows the method's own bias).
Each variant's outputs are compared byte for byte with the reference's before timing (`byte_equal`).

    OUT=/tmp/out PYTHONPATH=. python bench/tree_variants.py

Writes $OUT/tree_variants.json and prints one JSON row per (stage, B, variant). Needs a CUDA device."""
import sys

sys.path.insert(0, "bench")
import torch

import engine_shapes
import tree_shapes
from specverify.kernels.triton import kv, tree
from specverify.kernels.triton.launch import cdiv, next_power_of_2


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


def pack_variant(wide, warps=None):
    """Our pack kernel with int64 (`wide`) or int32 offsets, at `warps` warps a program (None: ours)."""
    def call(**kw):
        q, batch = kw["Q"], kw["kv_indptr"].shape[0] - 1
        blocks = cdiv(cdiv(q * kw["max_kv_len"], 8), tree.PACK_BYTES)
        tree.pack_kernel[(batch, blocks)](
            kw["mask"].view(torch.uint8), kw["kv_indptr"], kw["packed_indptr"], kw["packed"], Q=q,
            BYTES=tree.PACK_BYTES, WIDE=wide, LONG=False,
            num_warps=warps or (4 if batch * blocks <= tree.PACK_ONE_WAVE else 2))
    return call


def assign_variant(one_step=True, requests=kv.REQUESTS, warps=kv.ASSIGN_WARPS):
    """Our assign kernel with its prefix sum in one load (`one_step`) or a loop, `requests` requests and
    `warps` warps a program."""
    def call(**kw):
        batch, loc, table = kw["req_pool_indices"].shape[0], kw["out_cache_loc"], kw["req_to_token"]
        low, high = kv.SLOT_BLOCKS
        width = min(max(next_power_of_2(cdiv(loc.shape[0], batch)), low), high)
        kv.assign_kernel[(cdiv(batch, requests),)](
            kw["req_pool_indices"], kw["start_offset"], kw["end_offset"], loc, table, *table.stride(), batch,
            BLOCK_R=requests, BLOCK_B=min(next_power_of_2(batch), kv.PREFIX_BLOCK), BLOCK=width,
            ONE_STEP=one_step and batch <= kv.PREFIX_BLOCK, num_warps=warps)
    return call


VARIANTS = {
    "kv.assign_req_to_token": {
        "ours": kv.assign_req_to_token,
        "loop": assign_variant(one_step=False),
        "r1": assign_variant(requests=1),
        "r2": assign_variant(requests=2),
        "r8": assign_variant(requests=8),
        "w2": assign_variant(warps=2),
        "aa_control": engine_shapes.same_as_reference(tree_shapes.assign_reference),
    },
    "tree.pack_mask": {
        "ours": tree.pack_mask,
        "i64": pack_variant(True),
        "w1": pack_variant(False, 1),
        "w2": pack_variant(False, 2),
        "aa_control": engine_shapes.same_as_reference(tree_shapes.pack_reference),
    },
    "tree.reconstruct_from_mask": {
        "ours": tree.reconstruct_from_mask,
        "i64": rec_variant(True),
        "aa_control": engine_shapes.same_as_reference(tree_shapes.reconstruct_reference),
    },
}


if __name__ == "__main__":
    sys.exit(engine_shapes.sweep(VARIANTS, tree_shapes.CASES, "tree_variants"))
