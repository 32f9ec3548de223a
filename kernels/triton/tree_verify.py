"""Triton kernels of tree verification: one program per request, one launch per call, no host sync
outside checked mode.

`greedy_kernel` walks the tree as the contract reads: per level, along the child list until the first
match. `longest_kernel` is a depth-first search over matching children that keeps the current root path
and the best one so far in registers (one lane per depth), so it needs no stack in memory; a strictly
deeper path replaces the best, and the search ends early once a path reaches S - 1 levels.
`sample_kernel` walks like the greedy one, writing the rejected children's draft_probs cells as it goes,
then (after a barrier, as it reads those cells back) sweeps the residual row in tiles twice: its sum,
then the inverse-CDF pick. The division mass / acc is `div_rn` (Triton's `/` on f32 is approximate on
NVIDIA GPUs).
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.oracles import tree_verify as oracle

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
    kernel[(batch,)](candidates.contiguous(), retrieve_index.contiguous(), retrieve_next_token.contiguous(),
                     retrieve_next_sibling.contiguous(), target_predict.contiguous(), predicts, accept_index,
                     accept_index.stride(0), accept_token_num, n, levels, **block)


@prepared
def verify_greedy(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                  predicts, accept_index, accept_token_num):
    """See `specverify.oracles.tree_verify.verify_greedy`."""
    verify(greedy_kernel, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
           predicts, accept_index, accept_token_num)


def verify_longest_path(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, target_predict,
                        predicts, accept_index, accept_token_num):
    """See `specverify.oracles.tree_verify.verify_longest_path`."""
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
    """See `specverify.oracles.tree_verify.sample_target_only`."""
    sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           le=False)


def sample_target_only_le(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                          uniform_samples, uniform_final, target_probs, draft_probs, threshold_single, threshold_acc,
                          predicts, accept_index, accept_token_num):
    """Dialect `le`: see `specverify.oracles.tree_verify.sample_target_only_le`."""
    sample(candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling, uniform_samples, uniform_final,
           target_probs, draft_probs, threshold_single, threshold_acc, predicts, accept_index, accept_token_num,
           le=True)
