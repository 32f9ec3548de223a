"""Device time of our Triton tree and KV kernels beside kernels of SGLang 0.5.23's launch shape (issue 31),
in one run on one GPU, as `bench/engine_shapes.py` does for the chain stages. Each reference is written
here from reading SGLang's Triton source (`sglang/kernels/ops/speculative/`, `srt/mem_cache/allocation.py`):
the same grid, the same per-program loops and tile widths, the same constexprs, int32 lane arithmetic:

- accept_out_cache_loc (`fill_accept_out_cache_loc`): one program per entry of the [B, S] array, each
  counting the kept entries before it over next_pow2(B*S) lanes, then one scalar gather and store;
- assign_req_to_token (`assign_req_to_token_pool`): one program per request, its output offset summed over
  next_pow2(B) lanes, its range copied 32 slots at a time; the table's row length a constexpr;
- reconstruct_from_mask (the Triton build of `reconstruct_indices_from_tree_mask`): one program per request
  holding the whole N x N mask, N a constexpr, 1, 2 or 4 warps by the tile's side;
- pack_mask (`pack_verify_mask_into`): a program per request and 256 output bytes, offsets in int32;
- verify_greedy (`verify_tree_greedy_kernel_triton`): one program per request, the levels and the sibling
  steps unrolled loops of constexpr length (S - 1 and N) behind an early-exit flag;
- build (`sgl_build_tree_kernel_efficient_triton` and its glue): one -1 fill of both link outputs, the
  exclusive prefix sum of the lengths, then one program per request that links each node by a scan of
  `selected_index` and writes each mask row by walking its ancestors up to `depth` steps.

    OUT=/tmp/out PYTHONPATH=. python bench/tree_shapes.py [--batch 1 64 1024] [--rounds 7]

Writes $OUT/tree_shapes.json and prints the table; exits 1 when an output differs from ours.
"""
from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

import engine_shapes
from specverify.kernels.triton import kv, tree
from specverify.kernels.triton.launch import next_power_of_2


@triton.jit
def accept_per_entry(index_ptr, loc_ptr, out_ptr, LANES: tl.constexpr):
    e = tl.program_id(0)
    lanes = tl.arange(0, LANES)
    kept = (tl.load(index_ptr + lanes, mask=lanes < e, other=-1) != -1).to(tl.int64)
    entry = tl.load(index_ptr + e)
    if entry > -1:
        tl.store(out_ptr + tl.sum(kept), tl.load(loc_ptr + entry))


def accept_reference(kw):
    index, loc, out = kw["accept_index"], kw["out_cache_loc"], kw["accepted_out_cache_loc"]
    assert index.is_contiguous(), "the engine's kernel reads accept_index as one flat array"
    size = index.numel()
    return lambda: accept_per_entry[(size,)](index, loc, out, LANES=next_power_of_2(size))


@triton.jit
def assign_per_request(rpi_ptr, table_ptr, start_ptr, end_ptr, loc_ptr, ROW: tl.constexpr, LANES: tl.constexpr):
    r = tl.program_id(0)
    start = tl.load(start_ptr + r)
    end = tl.load(end_ptr + r)
    row = table_ptr + tl.load(rpi_ptr + r) * ROW
    lanes = tl.arange(0, LANES)
    before = tl.sum(tl.load(end_ptr + lanes, mask=lanes < r, other=0) - tl.load(start_ptr + lanes, mask=lanes < r,
                                                                                 other=0))
    column = start + tl.arange(0, 32)
    source = loc_ptr + before + tl.arange(0, 32)
    for _ in range(tl.cdiv(end - start, 32)):
        inside = column < end
        tl.store(row + column, tl.load(source, mask=inside), mask=inside)
        column += 32
        source += 32


def assign_reference(kw):
    table = kw["req_to_token"]
    assert table.stride() == (table.shape[1], 1), "the engine's kernel reads a row-major table"
    batch = kw["req_pool_indices"].shape[0]
    args = (kw["req_pool_indices"], table, kw["start_offset"], kw["end_offset"], kw["out_cache_loc"])
    return lambda: assign_per_request[(batch,)](*args, ROW=table.shape[1], LANES=next_power_of_2(batch))


@triton.jit
def reconstruct_whole_mask(mask_ptr, seq_ptr, pos_ptr, ri_ptr, nt_ptr, ns_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    i = tl.arange(0, BLOCK)
    rows, cols = i[:, None], i[None, :]
    m = tl.load(mask_ptr + b * N * N + rows * N + cols, mask=(rows < N) & (cols < N), other=0).to(tl.int1)
    anc = m & (cols < rows)
    depth = tl.sum(anc.to(tl.int32), axis=1)
    parent = tl.max(tl.where(anc, cols, -1), axis=1)
    child = tl.min(tl.where(anc, rows, N), axis=0)
    has_child = tl.max(anc.to(tl.int32), axis=0) > 0
    same = (parent[:, None] == parent[None, :]) & (rows > cols) & (rows < N)
    sibling = tl.min(tl.where(same, rows, N), axis=0)
    out = b * N + i
    live = i < N
    tl.store(pos_ptr + out, depth.to(tl.int64) + tl.load(seq_ptr + b).to(tl.int64), mask=live)
    tl.store(ri_ptr + out, out.to(tl.int64), mask=live)
    tl.store(nt_ptr + out, tl.where(has_child, child, -1).to(tl.int64), mask=live)
    tl.store(ns_ptr + out, tl.where((parent >= 0) & (sibling < N), sibling, -1).to(tl.int64), mask=live)


def reconstruct_reference(kw):
    n = kw["N"]
    block = next_power_of_2(n)
    batch = kw["verified_seq_len"].shape[0]
    args = (kw["tree_mask"], kw["verified_seq_len"], kw["positions"], kw["retrieve_index"], kw["retrieve_next_token"],
            kw["retrieve_next_sibling"])
    warps = 1 if block <= 16 else 2 if block <= 32 else 4
    return lambda: reconstruct_whole_mask[(batch,)](*args, N=n, BLOCK=block, num_warps=warps)


@triton.jit
def pack_int32(mask_ptr, kv_ptr, out_ptr, packed_ptr, Q: tl.constexpr, BYTES: tl.constexpr):
    r = tl.program_id(0)
    byte = tl.program_id(1) * BYTES + tl.arange(0, BYTES)
    bit = tl.arange(0, 8)
    start = tl.load(kv_ptr + r)
    count = (tl.load(kv_ptr + r + 1) - start) * Q
    offsets = byte[:, None] * 8 + bit[None, :]
    values = tl.load(mask_ptr + start * Q + offsets, offsets < count, other=0)
    packed = tl.sum(values.to(tl.uint32) << bit[None, :], axis=1)
    tl.store(packed_ptr + tl.load(out_ptr + r) + byte, packed.to(tl.uint8), byte < tl.cdiv(count, 8))


def pack_reference(kw):
    q, longest = kw["Q"], kw["max_kv_len"]
    batch = kw["kv_indptr"].shape[0] - 1
    args = (kw["mask"], kw["kv_indptr"], kw["packed_indptr"], kw["packed"])
    return lambda: pack_int32[(batch, triton.cdiv(q * longest, 8 * 256))](*args, Q=q, BYTES=256)


@triton.jit
def greedy_unrolled(predicts_ptr, accept_ptr, num_ptr, cand_ptr, index_ptr, token_ptr, sibling_ptr, predict_ptr,
                    S: tl.constexpr, N: tl.constexpr):
    b = tl.program_id(0)
    last = tl.load(index_ptr + b * N)
    tl.store(accept_ptr + b * S, last)
    count = last * 0
    cur = last * 0
    going = 1
    for _ in range(1, S):
        if going:
            cur = tl.load(token_ptr + b * N + cur)
            want = tl.load(predict_ptr + last)
            found = 0
            for _ in range(N):
                if found == 0:
                    valid = cur != -1
                    at = b * N + cur * valid
                    slot = tl.load(index_ptr + at)
                    match = valid & (tl.load(cand_ptr + at) == want)
                    tl.store(predicts_ptr + last, want, mask=match)
                    tl.store(accept_ptr + b * S + count + 1, slot, mask=match)
                    count += match
                    last = tl.where(match, slot, last)
                    found = match * 1 + (~valid) * (-1)
                    cur = tl.load(sibling_ptr + at, mask=~match & valid, other=cur)
            if found != 1:
                going = 0
    tl.store(num_ptr + b, count)
    tl.store(predicts_ptr + last, tl.load(predict_ptr + last))


def greedy_reference(kw):
    accept = kw["accept_index"]
    assert accept.is_contiguous(), "the engine's kernel reads accept_index rows S apart"
    batch, n = kw["candidates"].shape
    args = (kw["predicts"], accept, kw["accept_token_num"], kw["candidates"], kw["retrieve_index"],
            kw["retrieve_next_token"], kw["retrieve_next_sibling"], kw["target_predict"])
    return lambda: greedy_unrolled[(batch,)](*args, S=accept.shape[1], N=n)


@triton.jit
def build_per_request(pl_ptr, sel_ptr, seq_ptr, before_ptr, mask_ptr, pos_ptr, ri_ptr, nt_ptr, ns_ptr,
                      TOPK: tl.constexpr, DEPTH: tl.constexpr, N: tl.constexpr, PL_STRIDE: tl.constexpr,
                      SEL_STRIDE: tl.constexpr):
    b = tl.program_id(0)
    seq = tl.load(seq_ptr + b)
    first = (N * N * b).to(seq.dtype) + tl.load(before_ptr + b) * N
    tl.store(pos_ptr + b * N, seq)
    for i in range(N - 1, 0, -1):
        tl.store(ri_ptr + b * N + i, b * N + i)
        group = tl.load(sel_ptr + b * SEL_STRIDE + i - 1) // TOPK
        parent = 0
        found = 0
        if group == 0:
            found = 1
        else:
            beam = tl.load(pl_ptr + b * PL_STRIDE + group)
            for p in range(N - 1):
                if found == 0:
                    if tl.load(sel_ptr + b * SEL_STRIDE + p) == beam:
                        parent = p + 1
                        found = 1
        if found == 1:
            head = nt_ptr + b * N + parent
            old = tl.load(head)
            tl.store(head, i)
            if old != -1:
                tl.store(ns_ptr + b * N + i, old)
    tl.store(ri_ptr + b * N, b * N)
    for node in range(N):
        row = first + (seq + N) * node + seq + 1
        tl.store(mask_ptr + row - 1, 1)
        for i in range(N - 1):
            tl.store(mask_ptr + row + i, 0)
        if node > 0:
            cur = node - 1
            steps = 0
            going = 1
            for _ in range(DEPTH):
                if going:
                    steps += 1
                    tl.store(mask_ptr + row + cur, 1)
                    group = tl.load(sel_ptr + b * SEL_STRIDE + cur) // TOPK
                    if group == 0:
                        going = 0
                    else:
                        beam = tl.load(pl_ptr + b * PL_STRIDE + group)
                        hit = 0
                        for p in range(N - 1):
                            if hit == 0:
                                if tl.load(sel_ptr + b * SEL_STRIDE + p) == beam:
                                    cur = p
                                    hit = 1
                        if hit == 0:
                            going = 0
            tl.store(pos_ptr + b * N + node, steps + seq)


@triton.jit
def fill_links(token_ptr, sibling_ptr, size, BLOCK: tl.constexpr):
    k = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(token_ptr + k, tl.full([BLOCK], -1, tl.int64), mask=k < size)
    tl.store(sibling_ptr + k, tl.full([BLOCK], -1, tl.int64), mask=k < size)


def build_reference(kw):
    assert kw["tree_mask_mode"] == 0, "the bench input is FULL_MASK, the mode SGLang's Triton build is timed in"
    seq, n = kw["verified_seq_len"], kw["N"]
    links = (kw["retrieve_next_token"], kw["retrieve_next_sibling"])
    pl, sel = kw["parent_list"], kw["selected_index"]

    size = seq.shape[0] * n

    def call():     # SGLang's glue fills its [3, B, N] retrieve buffer with -1 in one launch
        fill_links[(triton.cdiv(size, 1024),)](*links, size, BLOCK=1024)
        before = torch.cumsum(seq, 0) - seq
        build_per_request[(seq.shape[0],)](pl, sel, seq, before, kw["tree_mask"], kw["positions"],
                                           kw["retrieve_index"], *links, TOPK=kw["topk"], DEPTH=kw["depth"], N=n,
                                           PL_STRIDE=pl.stride(0), SEL_STRIDE=sel.stride(0))
    return call


CASES = {"kv.accept_out_cache_loc": (kv.accept_out_cache_loc, accept_reference),
         "kv.assign_req_to_token": (kv.assign_req_to_token, assign_reference),
         "tree.reconstruct_from_mask": (tree.reconstruct_from_mask, reconstruct_reference),
         "tree.pack_mask": (tree.pack_mask, pack_reference),
         "tree.verify_greedy": (tree.verify_greedy, greedy_reference),
         "tree.build": (tree.build, build_reference)}


if __name__ == "__main__":
    sys.exit(engine_shapes.run(CASES, "tree_shapes", [1, 64, 1024], "SGLang shape"))
