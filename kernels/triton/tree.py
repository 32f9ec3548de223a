"""Triton kernels of the `tree` family: one program per request (per request and PACK_BYTES output bytes for
`pack_mask`), one launch per call, no host sync outside checked mode.

`tree.build`: a request's parents go to a scratch row first (a barrier makes them visible to the whole
program); depths and masks then come from walking each node's ancestor chain through that row (a gather
per level, until every chain has passed the root), and the links from tiles of rows by all N nodes (the
lowest matching node by a min). Every offset is int64.

`tree.reconstruct_from_mask`: a tree of up to ONE_TILE_NODES nodes is one register tile (its mask loaded
once, every output reduced from it); a larger one goes in tiles of rows, its parents through a scratch row.
`tree.pack_mask`: a program per request and PACK_BYTES output bytes; offsets in int32 while the mask's bits
and the packed bytes (with the grid's reach past a segment) stay under 2**31, else the program's first bit and
byte in int64. 4 warps a program while the grid fits the GPU at once
(PACK_ONE_WAVE programs), 2 beyond, so a wider grid still runs in about one wave. The grid is (B, blocks), or
(blocks, B) past GRID_Y blocks a request (Q * max_kv_len > 2**27 bits); both past it is refused.

Verification: the greedy walk follows the contract: per level, along the child list until the first match.
A tree of up to ONE_TILE_NODES nodes is walked in registers (`greedy_tile_kernel`: one round of loads, one
gather of the predictions, then lane picks only); `greedy_kernel` walks larger ones from memory.
`longest_kernel` is a depth-first search over matching children that keeps the current
root path and the best one so far in registers (one lane per depth), so it needs no stack in memory; a
strictly deeper path replaces the best, and the search ends early once a path reaches S - 1 levels.
`sample_kernel` walks like the greedy one, writing the rejected children's draft_probs cells as it goes,
then (after a barrier, as it reads those cells back) sweeps the residual row in tiles twice: its sum,
then the inverse-CDF pick. The division mass / acc is `div_rn` (Triton's `/` on f32 is approximate on
NVIDIA GPUs).
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import cdiv, launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared, scratch
from specverify.oracles import tree as oracle

TILE = 4096            # elements of a [rows, BLOCK_N] tile of the link and mask loops
PACK_BYTES = 256       # output bytes per program of pack_mask (2048 bits)
PACK_ONE_WAVE = 2048   # pack programs that fit an H100 or H200 at once with 4 warps each (132 SMs x 16)
GRID_Y = 65535         # programs a CUDA grid holds on its second axis (pack_mask's blocks go first past it)
ONE_TILE_NODES = 64    # reconstruct_from_mask and verify_greedy keep trees up to this many nodes in registers


def warps_for(block: int) -> int:
    """Warps of a one-tile program over `block` nodes: one up to 16 nodes, then more as the tile grows."""
    return 1 if block <= 16 else 2 if block <= 32 else 4


def tile_rows(block: int) -> int:
    """Nodes per tile: the whole tree up to 64 nodes, else at least 16 rows of TILE elements."""
    return min(block, max(16, TILE // block))


@launcher
@triton.jit
def build_kernel(pl_ptr, pl0, pl1, sel_ptr, sel0, sel1, seq_ptr, cum_ptr, parent_ptr, mask_ptr, pos_ptr, ri_ptr,
                 nt_ptr, ns_ptr, topk, N, MODE: tl.constexpr, WIDTH: tl.constexpr, BLOCK_N: tl.constexpr,
                 ROWS: tl.constexpr, SEARCH: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    node = tl.arange(0, BLOCK_N).to(tl.int64)
    live = node < N
    drafted = live & (node >= 1)
    entry = tl.load(sel_ptr + b * sel0 + (node - 1) * sel1, mask=drafted, other=0)
    group = entry // topk
    beam = tl.load(pl_ptr + b * pl0 + group * pl1, mask=drafted & (group > 0), other=0)
    lo = tl.zeros([BLOCK_N], dtype=tl.int64)            # lower bound of beam among the N-1 ascending entries
    hi = tl.zeros([BLOCK_N], dtype=tl.int64) + (N - 1)
    for _ in tl.static_range(SEARCH):
        open_ = lo < hi
        mid = (lo + hi) // 2
        value = tl.load(sel_ptr + b * sel0 + mid * sel1, mask=open_ & drafted, other=0)
        right = open_ & (value < beam)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(open_ & (value >= beam), mid, hi)
    parent = tl.where(drafted, tl.where(group == 0, 0, lo + 1), -1)
    row_parents = parent_ptr + b * N
    tl.store(row_parents + node, parent, mask=live)
    seq = tl.load(seq_ptr + b)
    if MODE == 0:       # FULL_MASK: rows of seq + N elements, the tree block after seq prefix columns
        stride = seq + N
        first = N * N * b + N * (tl.load(cum_ptr + b) - seq) + seq
    else:
        stride = N
        first = N * N * b
    if MODE != 2:       # zero the tree block; the walk below marks the ones
        cols = tl.arange(0, BLOCK_N).to(tl.int64)
        for r0 in range(0, N, ROWS):
            rows = r0 + tl.arange(0, ROWS).to(tl.int64)
            inside = (rows < N)[:, None] & (cols < N)[None, :]
            tl.store(mask_ptr + first + rows[:, None] * stride + cols[None, :],
                     tl.zeros([ROWS, BLOCK_N], dtype=tl.uint8), mask=inside)
    tl.debug_barrier()
    cur = tl.where(live, node, -1)                      # self, then each ancestor up to the root
    level = tl.zeros([BLOCK_N], dtype=tl.int64) - 1
    bits = tl.zeros([BLOCK_N], dtype=tl.int64)
    while tl.max(cur, axis=0) >= 0:
        active = cur >= 0
        level += active.to(tl.int64)
        if MODE == 2:
            bits |= tl.where(active, tl.full([BLOCK_N], 1, tl.int64) << tl.maximum(cur, 0), 0)
        else:
            tl.store(mask_ptr + first + node * stride + cur, tl.full([BLOCK_N], 1, tl.uint8), mask=active)
        cur = tl.load(row_parents + cur, mask=active, other=-1)
    if MODE == 2:
        for w in tl.static_range(WIDTH):
            tl.store(mask_ptr + (b * N + node) * WIDTH + w, ((bits >> (8 * w)) & 0xFF).to(tl.uint8), mask=live)
    tl.store(pos_ptr + b * N + node, seq + level, mask=live)
    tl.store(ri_ptr + b * N + node, b * N + node, mask=live)
    for r0 in range(0, N, ROWS):
        rows = r0 + tl.arange(0, ROWS).to(tl.int64)
        inside = rows < N
        own = tl.load(row_parents + rows, mask=inside, other=-2)
        child = tl.where(parent[None, :] == rows[:, None], node[None, :], BLOCK_N)
        first_child = tl.min(child, axis=1)
        later = (parent[None, :] == own[:, None]) & (own[:, None] >= 0) & (node[None, :] > rows[:, None])
        sibling = tl.min(tl.where(later, node[None, :], BLOCK_N), axis=1)
        tl.store(nt_ptr + b * N + rows, tl.where(first_child == BLOCK_N, -1, first_child), mask=inside)
        tl.store(ns_ptr + b * N + rows, tl.where(sibling == BLOCK_N, -1, sibling), mask=inside)


@prepared
def build(*, parent_list, selected_index, verified_seq_len, topk, depth, N, tree_mask_mode, tree_mask,
          positions, retrieve_index, retrieve_next_token, retrieve_next_sibling):
    """See `specverify.oracles.tree.build`."""
    validate(oracle.check_build, parent_list, selected_index, verified_seq_len, topk, depth, N, tree_mask_mode,
             tree_mask, positions, retrieve_index, retrieve_next_token, retrieve_next_sibling,
             values=reads_values(verified_seq_len))
    batch = verified_seq_len.shape[0]
    if batch == 0:
        return
    parents = scratch((batch, N), torch.long, verified_seq_len.device)
    cum = torch.cumsum(verified_seq_len, 0) if tree_mask_mode == oracle.FULL_MASK else verified_seq_len
    pl = parent_list if parent_list.numel() else verified_seq_len           # never read when empty
    sel = selected_index if selected_index.numel() else verified_seq_len
    mask = tree_mask.view(torch.uint8)
    block = next_power_of_2(N)
    build_kernel[(batch,)](
        pl, *(parent_list.stride() if parent_list.numel() else (0, 0)),
        sel, *(selected_index.stride() if selected_index.numel() else (0, 0)),
        verified_seq_len, cum, parents, mask, positions, retrieve_index, retrieve_next_token,
        retrieve_next_sibling, topk, N, MODE=tree_mask_mode, WIDTH=oracle.row_bytes(N),
        BLOCK_N=block, ROWS=tile_rows(block), SEARCH=N.bit_length() + 1)


@launcher
@triton.jit
def reconstruct_tile_kernel(mask_ptr, seq_ptr, pos_ptr, ri_ptr, nt_ptr, ns_ptr, N: tl.constexpr,
                            BLOCK_N: tl.constexpr, WIDE: tl.constexpr):
    """A whole N x N mask in one tile (BLOCK_N <= ONE_TILE_NODES): every output from registers; N is a
    compile-time constant (one build per tree size, as the engines specialize). Offsets are int32 while the
    mask's B * N * N elements stay under 2**31 (every offset is below that), int64 past it (WIDE)."""
    b = tl.program_id(0)
    if WIDE:
        b = b.to(tl.int64)
    node = tl.arange(0, BLOCK_N)
    rows, cols = node[:, None], node[None, :]
    marked = tl.load(mask_ptr + b * N * N + rows * N + cols, mask=(rows < N) & (cols < N), other=0) != 0
    below = marked & (cols < rows)                       # below[i, j]: j < i is an ancestor of i
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


@launcher
@triton.jit
def reconstruct_kernel(mask_ptr, seq_ptr, parent_ptr, pos_ptr, ri_ptr, nt_ptr, ns_ptr, N, BLOCK_N: tl.constexpr,
                       ROWS: tl.constexpr):
    """Trees past ONE_TILE_NODES: tiles of rows, the parents through a scratch row."""
    b = tl.program_id(0).to(tl.int64)
    base = mask_ptr + b * N * N
    row_parents = parent_ptr + b * N
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    seq = tl.load(seq_ptr + b)
    for r0 in range(0, N, ROWS):
        rows = r0 + tl.arange(0, ROWS).to(tl.int64)
        inside = rows < N
        below = inside[:, None] & (cols[None, :] < rows[:, None])
        marked = tl.load(base + rows[:, None] * N + cols[None, :], mask=below, other=0) != 0
        tl.store(pos_ptr + b * N + rows, seq + tl.sum(marked.to(tl.int64), axis=1), mask=inside)
        tl.store(row_parents + rows, tl.max(tl.where(marked, cols[None, :], -1), axis=1), mask=inside)
        tl.store(ri_ptr + b * N + rows, b * N + rows, mask=inside)
        above = inside[:, None] & (cols[None, :] > rows[:, None]) & (cols[None, :] < N)
        marks_me = tl.load(base + cols[None, :] * N + rows[:, None], mask=above, other=0) != 0   # mask[k, i]
        lowest = tl.min(tl.where(marks_me, cols[None, :], BLOCK_N), axis=1)
        tl.store(nt_ptr + b * N + rows, tl.where(lowest == BLOCK_N, -1, lowest), mask=inside)
    tl.debug_barrier()
    parent = tl.load(row_parents + cols, mask=cols < N, other=-2)
    for r0 in range(0, N, ROWS):
        rows = r0 + tl.arange(0, ROWS).to(tl.int64)
        inside = rows < N
        own = tl.load(row_parents + rows, mask=inside, other=-2)
        later = (parent[None, :] == own[:, None]) & (own[:, None] >= 0) & (cols[None, :] > rows[:, None])
        sibling = tl.min(tl.where(later, cols[None, :], BLOCK_N), axis=1)
        tl.store(ns_ptr + b * N + rows, tl.where(sibling == BLOCK_N, -1, sibling), mask=inside)


@prepared
def reconstruct_from_mask(*, tree_mask, verified_seq_len, N, positions, retrieve_index, retrieve_next_token,
                          retrieve_next_sibling):
    """See `specverify.oracles.tree.reconstruct_from_mask`."""
    batch = validate(oracle.check_reconstruct, tree_mask, verified_seq_len, N, positions, retrieve_index,
                     retrieve_next_token, retrieve_next_sibling, values=reads_values(verified_seq_len))
    if batch == 0:
        return
    block = next_power_of_2(N)
    outputs = (positions, retrieve_index, retrieve_next_token, retrieve_next_sibling)
    if block <= ONE_TILE_NODES:
        reconstruct_tile_kernel[(batch,)](tree_mask.view(torch.uint8), verified_seq_len, *outputs, N=N,
                                          BLOCK_N=block, WIDE=batch * N * N >= 2**31,
                                          num_warps=warps_for(block))
        return
    parents = scratch((batch, N), torch.long, verified_seq_len.device)
    reconstruct_kernel[(batch,)](tree_mask.view(torch.uint8), verified_seq_len, parents, *outputs, N, BLOCK_N=block,
                                 ROWS=tile_rows(block))


@launcher
@triton.jit
def pack_kernel(mask_ptr, kv_ptr, out_ptr, packed_ptr, Q: tl.constexpr, BYTES: tl.constexpr, WIDE: tl.constexpr,
                LONG: tl.constexpr):
    """Program (r, p) packs bytes [p*BYTES, (p+1)*BYTES) of request r's segment; the grid is (B, blocks), or
    (blocks, B) when LONG. Offsets are int32 unless WIDE (set when an offset may reach 2**31: then the
    program's first bit and byte are int64, its lanes' offsets from them int32); Q is a compile-time constant
    (one build per query width, as the engines specialize)."""
    if LONG:
        r, p = tl.program_id(1), tl.program_id(0)
    else:
        r, p = tl.program_id(0), tl.program_id(1)
    start = tl.load(kv_ptr + r)
    out = tl.load(out_ptr + r)
    first = p * BYTES                                 # the program's first byte in the segment
    if WIDE:
        start, out, first = start.to(tl.int64), out.to(tl.int64), first.to(tl.int64)
    left = (tl.load(kv_ptr + r + 1) - start) * Q - first * 8     # bits from that byte on
    bits = tl.minimum(tl.maximum(left, 0), BYTES * 8).to(tl.int32)
    byte = tl.arange(0, BYTES)
    bit = tl.arange(0, 8)
    index = byte[:, None] * 8 + bit[None, :]
    marked = tl.load(mask_ptr + (start * Q + first * 8) + index, mask=index < bits, other=0)   # bool bytes: 0 or 1
    value = tl.sum(marked.to(tl.int32) << bit[None, :], axis=1)
    tl.store(packed_ptr + (out + first) + byte, value.to(tl.uint8), mask=byte * 8 < bits)


@prepared
def pack_mask(*, mask, kv_indptr, packed_indptr, Q, max_kv_len, packed):
    """See `specverify.oracles.tree.pack_mask`. The grid covers Q*max_kv_len bits per request, as the
    engines launch it (a longer segment is invalid input)."""
    batch = validate(oracle.check_pack, mask, kv_indptr, packed_indptr, Q, max_kv_len, packed,
                     values=reads_values(kv_indptr))
    blocks = cdiv(cdiv(Q * max_kv_len, 8), PACK_BYTES)
    if batch == 0 or blocks == 0:
        return
    source = mask.view(torch.uint8) if mask.numel() else kv_indptr      # never read when empty
    reach = blocks * PACK_BYTES        # bytes past a segment's first that a program row may address
    wide = max(mask.numel() + 8 * reach, packed.numel() + reach) >= 2**31
    long = blocks > GRID_Y
    if long and batch > GRID_Y:
        raise ValueError(f"max_kv_len: Q * max_kv_len = {Q * max_kv_len} bits a request over B = {batch} requests "
                         f"needs a grid of more than {GRID_Y} programs on both axes (the Triton kernel's limit)")
    grid = (blocks, batch) if long else (batch, blocks)
    pack_kernel[grid](source, kv_indptr, packed_indptr, packed, Q=Q, BYTES=PACK_BYTES, WIDE=wide, LONG=long,
                      num_warps=4 if batch * blocks <= PACK_ONE_WAVE else 2)


# ---------------------------------------------------------------- tree verification

BLOCK_V = 1024     # residual tile


@triton.jit
def next_match(cand_ptr, sibling_ptr, base, start, want):
    """The first node from `start` along the sibling links whose candidate is `want` (-1: none)."""
    c = start
    found = start * 0 - 1
    while c >= 0:
        hit = tl.load(cand_ptr + base + c) == want
        found = tl.where(hit, c, found)
        c = tl.where(hit, -1, tl.load(sibling_ptr + base + c))
    return found


@triton.jit
def prediction(index_ptr, predict_ptr, base, node):
    """(slot, the target's prediction at that slot) of a node."""
    slot = tl.load(index_ptr + base + node)
    return slot, tl.load(predict_ptr + slot)


@launcher
@triton.jit
def greedy_kernel(cand_ptr, index_ptr, token_ptr, sibling_ptr, predict_ptr, predicts_ptr, accept_ptr, accept_stride,
                  num_ptr, n, levels):
    b = tl.program_id(0).to(tl.int64)
    base = b * n
    last, want = prediction(index_ptr, predict_ptr, base, 0)
    tl.store(accept_ptr + b * accept_stride, last.to(tl.int32))
    row = last * 0
    count = row
    go = levels > 0
    while go:
        child = next_match(cand_ptr, sibling_ptr, base, tl.load(token_ptr + base + row), want)
        go = child >= 0
        tl.store(predicts_ptr + last, want.to(tl.int32), mask=go)
        slot = tl.load(index_ptr + base + child, mask=go, other=0)
        tl.store(accept_ptr + b * accept_stride + count + 1, slot.to(tl.int32), mask=go)
        count += go.to(tl.int64)
        row = tl.where(go, child, row)
        last = tl.where(go, slot, last)
        want = tl.load(predict_ptr + last)
        go = go & (count < levels)
    tl.store(predicts_ptr + last, want.to(tl.int32))
    tl.store(num_ptr + b, count.to(tl.int32))


@triton.jit
def at(values, lanes, i):
    """values[i] of a register row (0 when i is outside it)."""
    return tl.sum(tl.where(lanes == i, values, 0), axis=0)


@launcher
@triton.jit
def greedy_tile_kernel(cand_ptr, index_ptr, token_ptr, sibling_ptr, predict_ptr, predicts_ptr, accept_ptr,
                       accept_stride, num_ptr, n, levels, BLOCK_N: tl.constexpr):
    """The greedy walk over a tree held in registers (BLOCK_N <= ONE_TILE_NODES): one round of loads for the
    links, candidates and slots, one gather of the predictions at every node's slot, the walk by lane picks
    (a sibling list walks at most n steps), then the path's stores at once."""
    b = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_N)
    live = lanes < n
    row = b * n + lanes
    cand = tl.load(cand_ptr + row, mask=live, other=-1)
    first = tl.load(token_ptr + row, mask=live, other=-1)
    step = (tl.load(sibling_ptr + row, mask=live, other=-1) + 1) * 2      # (next sibling + 1) * 2, + 1 on a match
    slot = tl.load(index_ptr + row, mask=live, other=0)
    want = tl.load(predict_ptr + slot, mask=live, other=0)                # the target's prediction at each node
    place = tl.where(lanes == 0, 0, -1)                                   # each node's place on the path
    count = tl.sum(place * 0, axis=0)                                     # int32 scalars from here on
    node = count
    go = levels > 0
    while go:
        goal = at(want, lanes, node)
        c = at(first, lanes, node).to(tl.int32)
        packed = step + (cand == goal).to(step.dtype)
        found = count * 0 - 1
        walked = count * 0
        while (c >= 0) & (walked < n):
            link = at(packed, lanes, c)
            hit = (link & 1) == 1
            found = tl.where(hit, c, found)
            c = tl.where(hit, -1, (link >> 1) - 1).to(tl.int32)
            walked += 1
        go = found >= 0
        count += go.to(count.dtype)
        place = tl.where(go & (lanes == found), count, place)
        node = tl.where(go, found, node)
        go = go & (count < levels)
    on = place >= 0
    tl.store(accept_ptr + b * accept_stride + place, slot.to(tl.int32), mask=on)
    tl.store(predicts_ptr + slot, want.to(tl.int32), mask=on)
    tl.store(num_ptr + b, count.to(tl.int32))


@launcher
@triton.jit
def longest_kernel(cand_ptr, index_ptr, token_ptr, sibling_ptr, predict_ptr, predicts_ptr, accept_ptr, accept_stride,
                   num_ptr, n, levels, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    base = b * n
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    path = lanes * 0                   # path[d]: the current path's node at depth d
    best = path
    _, want = prediction(index_ptr, predict_ptr, base, 0)
    start = tl.load(token_ptr + base, mask=levels > 0, other=-1)
    child = next_match(cand_ptr, sibling_ptr, base, start, want)
    node = want * 0
    depth = node
    best_depth = node
    go = levels > 0
    while go:
        down = child >= 0
        deeper = depth + 1
        path = tl.where(down & (lanes == deeper), child, path)
        better = down & (deeper > best_depth)
        best = tl.where(better, path, best)
        best_depth = tl.where(better, deeper, best_depth)
        parent = tl.sum(tl.where(lanes == depth - 1, path, 0), axis=0)
        # down: the first matching child of `child`; up: the next matching sibling of `node`
        start_down = tl.load(token_ptr + base + child, mask=down & (deeper < levels), other=-1)
        start_up = tl.load(sibling_ptr + base + node, mask=(~down) & (depth > 0), other=-1)
        head = tl.where(down, child, parent)
        _, want = prediction(index_ptr, predict_ptr, base, head)
        finished = ((~down) & (depth == 0)) | (best_depth == levels)
        node = head
        depth = tl.where(down, deeper, depth - 1)
        child = next_match(cand_ptr, sibling_ptr, base, tl.where(down, start_down, start_up), want)
        child = tl.where(finished, -1, child)
        go = ~finished
    on = lanes <= best_depth
    slots = tl.load(index_ptr + base + best, mask=on, other=0)
    wants = tl.load(predict_ptr + slots, mask=on, other=0)
    tl.store(accept_ptr + b * accept_stride + lanes, slots.to(tl.int32), mask=on)
    tl.store(predicts_ptr + slots, wants.to(tl.int32), mask=on)
    tl.store(num_ptr + b, best_depth.to(tl.int32))


def verify(kernel, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict, predicts,
           accept_index, accept_token_num, **meta) -> None:
    batch, n, spec = validate(oracle.check_verify_greedy, candidates, retrieve_index, retrieve_next_token,
                              retrieve_next_sibling, target_predict, predicts, accept_index, accept_token_num,
                              values=reads_values(retrieve_index))
    if batch == 0:
        return
    levels = min(spec - 1, n - 1)
    block = {"BLOCK": next_power_of_2(levels + 1)} if kernel is longest_kernel else {}
    if kernel is greedy_kernel and next_power_of_2(n) <= ONE_TILE_NODES:
        kernel, block = greedy_tile_kernel, {"BLOCK_N": next_power_of_2(n), "num_warps": 1}
    kernel[(batch,)](candidates.contiguous(), retrieve_index.contiguous(), retrieve_next_token.contiguous(),
                     retrieve_next_sibling.contiguous(), target_predict.contiguous(), predicts, accept_index,
                     accept_index.stride(0), accept_token_num, n, levels, **block)


@prepared
def verify_greedy(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                  predicts, accept_index, accept_token_num):
    """See `specverify.oracles.tree.verify_greedy`."""
    verify(greedy_kernel, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
           predicts, accept_index, accept_token_num)


def verify_longest_path(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                        predicts, accept_index, accept_token_num):
    """See `specverify.oracles.tree.verify_longest_path`."""
    verify(longest_kernel, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
           predicts, accept_index, accept_token_num)


@triton.jit
def residual_tile(tp_row, dp_row, ts2, ds2, v, vocab, reduced):
    """res over the lanes v: max(target - draft, 0) when `reduced`, else the target row as it is; 0 past V."""
    live = v < vocab
    target = tl.load(tp_row + v * ts2, mask=live, other=0.0)
    draft = tl.load(dp_row + v * ds2, mask=live, other=0.0)
    return tl.where(live, tl.where(reduced, tl.maximum(target - draft, 0.0), target), 0.0)


@launcher
@triton.jit
def sample_kernel(cand_ptr, index_ptr, token_ptr, sibling_ptr, u_ptr, us0, us1, final_ptr, tp_ptr, ts0, ts1, ts2,
                  dp_ptr, ds0, ds1, ds2, single, acc, predicts_ptr, accept_ptr, accept_stride, num_ptr, n, vocab,
                  levels, LE: tl.constexpr, BLOCK_V: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    base = b * n
    last = tl.load(index_ptr + base)
    tl.store(accept_ptr + b * accept_stride, last.to(tl.int32))
    row = last * 0
    count = row
    go = levels > 0
    while go:
        coin = tl.load(u_ptr + b * us0 + row * us1)
        mass = coin * 0.0
        c = tl.load(token_ptr + base + row)
        chosen = c * 0 - 1
        token = chosen
        while c >= 0:
            x = tl.load(cand_ptr + base + c)
            valid = (x >= 0) & (x < vocab)
            p = tl.load(tp_ptr + b * ts0 + row * ts1 + x * ts2, mask=valid, other=0.0)
            mass = tl.where(valid, mass + p, mass)
            share = tl.math.div_rn(mass, acc)
            if LE:
                accept = valid & ((coin <= share) | (p >= single))
            else:
                accept = valid & (p > 0) & ((coin < share) | (p >= single))
            tl.store(dp_ptr + b * ds0 + row * ds1 + x * ds2, p, mask=valid & (~accept))
            chosen = tl.where(accept, c, chosen)
            token = tl.where(accept, x, token)
            c = tl.where(accept, -1, tl.load(sibling_ptr + base + c))
        go = chosen >= 0
        tl.store(predicts_ptr + last, token.to(tl.int32), mask=go)
        slot = tl.load(index_ptr + base + chosen, mask=go, other=0)
        tl.store(accept_ptr + b * accept_stride + count + 1, slot.to(tl.int32), mask=go)
        count += go.to(tl.int64)
        row = tl.where(go, chosen, row)
        last = tl.where(go, slot, last)
        go = go & (count < levels)
    tl.debug_barrier()   # the residual reads the draft_probs cells written above
    reduced = count < levels
    tp_row = tp_ptr + b * ts0 + row * ts1
    dp_row = dp_ptr + b * ds0 + row * ds1
    total = tl.sum(tl.zeros([BLOCK_V], tl.float32), axis=0)
    for start in range(0, vocab, BLOCK_V):
        v = start + tl.arange(0, BLOCK_V).to(tl.int64)
        total += tl.sum(residual_tile(tp_row, dp_row, ts2, ds2, v, vocab, reduced), axis=0)
    threshold = tl.load(final_ptr + b) * total
    running = total * 0.0
    picked = count * 0 + vocab          # vocab: none yet
    positive = count * 0 - 1
    for start in range(0, vocab, BLOCK_V):
        v = start + tl.arange(0, BLOCK_V).to(tl.int64)
        res = residual_tile(tp_row, dp_row, ts2, ds2, v, vocab, reduced)
        cdf = running + tl.cumsum(res, axis=0)
        passes = (v < vocab) & (res > 0) & (cdf > threshold)
        picked = tl.minimum(picked, tl.min(tl.where(passes, v, vocab), axis=0))
        positive = tl.maximum(positive, tl.max(tl.where((v < vocab) & (res > 0), v, -1), axis=0))
        running += tl.sum(res, axis=0)
    pick = tl.where(picked < vocab, picked, tl.where(positive >= 0, positive, vocab - 1))
    tl.store(predicts_ptr + last, pick.to(tl.int32))
    tl.store(num_ptr + b, count.to(tl.int32))


def sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           le: bool) -> None:
    batch, n, spec, vocab = validate(
        oracle.check_sample_target_only, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
        uniform_samples, uniform_final, target_probs, draft_probs, threshold_single, threshold_acc, predicts,
        accept_index, accept_token_num, values=reads_values(retrieve_index))
    if batch == 0:
        return
    acc = float(max(np.float32(threshold_acc), oracle.THR_FLOOR))
    sample_kernel[(batch,)](
        candidates.contiguous(), retrieve_index.contiguous(), retrieve_next_token.contiguous(),
        retrieve_next_sibling.contiguous(), uniform_samples, *uniform_samples.stride(), uniform_final.contiguous(),
        target_probs, *target_probs.stride(), draft_probs, *draft_probs.stride(), float(np.float32(threshold_single)),
        acc, predicts, accept_index, accept_index.stride(0), accept_token_num, n, vocab, spec - 1, LE=le,
        BLOCK_V=min(BLOCK_V, next_power_of_2(vocab)))


@prepared
def sample_target_only(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples,
                       uniform_final, target_probs, draft_probs, threshold_single, threshold_acc, predicts,
                       accept_index, accept_token_num):
    """See `specverify.oracles.tree.sample_target_only`."""
    sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           le=False)


def sample_target_only_le(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                          uniform_samples, uniform_final, target_probs, draft_probs, threshold_single, threshold_acc,
                          predicts, accept_index, accept_token_num):
    """Dialect `le`: see `specverify.oracles.tree.sample_target_only_le`."""
    sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           le=True)
