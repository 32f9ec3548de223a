"""Candidate variants of our Triton `tree.reconstruct_from_mask` and `tree.pack_mask` kernels timed beside
SGLang's launch shape (bench/tree_shapes.py's references), for the rows of issue 31 still 1-4 % above it:
reconstruct with int32 lane offsets from int64 program bases, pack with 128 or 256 bytes per program and 2 or 4
warps. Each variant's outputs are compared byte for byte with the reference's before timing (`byte_equal`).

    OUT=/tmp/out PYTHONPATH=. python bench/tree_variants.py

Writes $OUT/tree_variants.json and prints one JSON row per (stage, B, variant). Needs a CUDA device."""
import json
import os
import sys

sys.path.insert(0, "bench")
import torch
import triton
import triton.language as tl

import engine_shapes
import tree_shapes
from specverify.judge import timing
from specverify.kernels.triton import tree
from specverify.kernels.triton.launch import cdiv, next_power_of_2
from specverify.records.registry import all_stages


@triton.jit
def rec_i32_n(mask_ptr, seq_ptr, pos_ptr, ri_ptr, nt_ptr, ns_ptr, N: tl.constexpr, BLOCK_N: tl.constexpr):
    """Ours with int32 lane offsets from int64 program bases, the sentinel N, and the root test after the
    sibling reduction (not inside the kin tile)."""
    b = tl.program_id(0).to(tl.int64)
    node = tl.arange(0, BLOCK_N)
    rows, cols = node[:, None], node[None, :]
    marked = tl.load(mask_ptr + b * (N * N) + (rows * N + cols), mask=(rows < N) & (cols < N), other=0).to(tl.int1)
    below = marked & (cols < rows)
    depth = tl.sum(below.to(tl.int32), axis=1)
    parent = tl.max(tl.where(below, cols, -1), axis=1)
    first_child = tl.min(tl.where(below, rows, N), axis=0)
    kin = (parent[:, None] == parent[None, :]) & (rows > cols) & (rows < N)
    sibling = tl.min(tl.where(kin, rows, N), axis=0)
    live = node < N
    first = b * N
    tl.store(pos_ptr + first + node, tl.load(seq_ptr + b) + depth, mask=live)
    tl.store(ri_ptr + first + node, first + node, mask=live)
    tl.store(nt_ptr + first + node, tl.where(first_child < N, first_child, -1).to(tl.int64), mask=live)
    tl.store(ns_ptr + first + node, tl.where((parent >= 0) & (sibling < N), sibling, -1).to(tl.int64), mask=live)


def rec_variant(kernel, warps):
    def call(**kw):
        n = kw["N"]
        block = next_power_of_2(n)
        batch = kw["verified_seq_len"].shape[0]
        kernel[(batch,)](kw["tree_mask"].view(torch.uint8), kw["verified_seq_len"], kw["positions"],
                         kw["retrieve_index"], kw["retrieve_next_token"], kw["retrieve_next_sibling"], N=n,
                         BLOCK_N=block, num_warps=warps)
    return call


@triton.jit
def pack_v(mask_ptr, kv_ptr, out_ptr, packed_ptr, Q: tl.constexpr, BYTES: tl.constexpr):
    """Bases int64 scalars, lanes int32; the bit count in int32 (a segment's bits fit: Q * max_kv_len)."""
    r = tl.program_id(0)
    start = tl.load(kv_ptr + r)
    count = (tl.load(kv_ptr + r + 1) - start) * Q - tl.program_id(1) * (BYTES * 8)
    first = tl.program_id(1).to(tl.int64) * BYTES
    byte = tl.arange(0, BYTES)
    bit = tl.arange(0, 8)
    index = byte[:, None] * 8 + bit[None, :]
    marked = tl.load(mask_ptr + (start.to(tl.int64) * Q + first * 8) + index, mask=index < count, other=0) != 0
    value = tl.sum(marked.to(tl.int32) << bit[None, :], axis=1)
    tl.store(packed_ptr + (tl.load(out_ptr + r).to(tl.int64) + first) + byte, value.to(tl.uint8),
             mask=byte * 8 < count)


def pack_variant(kernel, nbytes, warps):
    def call(**kw):
        q, longest = kw["Q"], kw["max_kv_len"]
        batch = kw["kv_indptr"].shape[0] - 1
        blocks = cdiv(cdiv(q * longest, 8), nbytes)
        kernel[(batch, blocks)](kw["mask"].view(torch.uint8), kw["kv_indptr"], kw["packed_indptr"], kw["packed"],
                                Q=q, BYTES=nbytes, num_warps=warps)
    return call


VARIANTS = {
    "tree.reconstruct_from_mask": {
        "ours": tree.reconstruct_from_mask,
        "i32n_w1": rec_variant(rec_i32_n, 1),
    },
    "tree.pack_mask": {
        "ours": tree.pack_mask,
        "v128_w2": pack_variant(pack_v, 128, 2),
        "v256_w2": pack_variant(pack_v, 256, 2),
        "v256_w4": pack_variant(pack_v, 256, 4),
    },
}


def main() -> int:
    if not torch.cuda.is_available():
        print("tree_variants: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    settings = timing.Settings()
    stages = all_stages()
    rows = []
    for stage, variants in VARIANTS.items():
        reference = tree_shapes.CASES[stage][1]
        for batch in (1, 64, 1024):
            for name, fn in variants.items():
                try:
                    row = engine_shapes.measure(stages[stage], batch, 7, settings, {stage: (fn, reference)})
                except Exception as exc:      # a variant that does not build is a row, not the end of the sweep
                    row = {"stage": stage, "B": batch, "error": repr(exc)[:300]}
                row["variant"] = name
                rows.append(row)
                print(json.dumps(row), flush=True)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "tree_variants.json.tmp"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    os.replace(os.path.join(out, "tree_variants.json.tmp"), os.path.join(out, "tree_variants.json"))
    return 0 if all(r.get("byte_equal") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
