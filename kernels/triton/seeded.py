"""Triton kernels of the `seeded` family: one launch, one program per request.

`seeded.chain_sampling`: a program draws its request's K + 2 uniforms in one vector (cuRAND's stream,
`specverify.kernels.triton.generators.curand_uniform_at`), decides every position's two acceptance tests at
once (U_i, and U_{i+1} for the count after the first rejection), then sweeps the one row it draws from in tiles
of up to BLOCK_V: once for the total, once for the running sum (`tl.cumsum` per tile plus the carried sum of the
tiles before), keeping the first positive cell whose running sum exceeds t = U * total and the last positive
cell. Every offset is int64."""
from __future__ import annotations

import triton
import triton.language as tl

from specverify.kernels.triton.generators import curand_uniform_at
from specverify.kernels.triton.launch import launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.kernels.validation import reads_values, validate
from specverify.oracles.seeded import check_chain_sampling

BLOCK_V = 1024     # the widest vocabulary tile


@launcher
@triton.jit
def chain_sampling_kernel(q_ptr, d_ptr, p_ptr, seed_ptr, offset_ptr, out_ptr, accepted_ptr, emitted_ptr, k, vocab,
                          BLOCK_K: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    seed = tl.load(seed_ptr + b).to(tl.uint64, bitcast=True)
    offset = tl.load(offset_ptr + b).to(tl.uint64, bitcast=True)
    lane = tl.arange(0, BLOCK_K).to(tl.int64)                 # BLOCK_K >= K + 2
    uniforms = curand_uniform_at(seed, b.to(tl.uint64), offset, lane.to(tl.uint64))
    after = curand_uniform_at(seed, b.to(tl.uint64), offset, lane.to(tl.uint64) + 1)
    position = lane < k
    draft = tl.load(d_ptr + b * k + lane, mask=position, other=-1).to(tl.int64)
    valid = position & (draft >= 0) & (draft < vocab)
    safe = tl.where(valid, draft, 0)
    p = tl.load(p_ptr + (b * (k + 1) + lane) * vocab + safe, mask=valid, other=0.0)
    q = tl.load(q_ptr + (b * k + lane) * vocab + safe, mask=valid, other=0.0)
    first = valid & (uniforms * q < p)
    later = valid & (after * q < p)
    pos = tl.min(tl.where(position & ~first, lane, k), 0)
    accepted = pos + tl.sum(tl.where(later & (lane > pos), 1, 0), 0)
    rejected = pos < k
    u = tl.sum(tl.where(lane == tl.where(rejected, k + 1, k), uniforms, 0.0), 0)
    read_q = tl.where(rejected, vocab, 0)             # the q row is read only after a rejection
    p_row = p_ptr + (b * (k + 1) + pos) * vocab
    q_row = q_ptr + (b * k + pos) * vocab
    total = 0.0
    for start in range(0, vocab, BLOCK):
        v = start + tl.arange(0, BLOCK).to(tl.int64)
        inside = v < vocab
        res = tl.load(p_row + v, mask=inside, other=0.0) - tl.load(q_row + v, mask=v < read_q, other=0.0)
        total += tl.sum(tl.maximum(res, 0.0), 0)
    t = u * total
    carried = 0.0
    found = tl.full([], -1, tl.int64)         # int64 like the vocabulary positions it takes (a loop-carried type)
    last = tl.full([], -1, tl.int64)
    for start in range(0, vocab, BLOCK):
        v = start + tl.arange(0, BLOCK).to(tl.int64)
        inside = v < vocab
        res = tl.load(p_row + v, mask=inside, other=0.0) - tl.load(q_row + v, mask=v < read_q, other=0.0)
        res = tl.maximum(res, 0.0)
        sums = tl.cumsum(res, 0) + carried
        hit = tl.min(tl.where(inside & (res > 0) & (sums > t), v, vocab), 0)
        found = tl.where((found < 0) & (hit < vocab), hit, found)
        last = tl.maximum(last, tl.max(tl.where(inside & (res > 0), v, -1), 0))
        carried += tl.sum(res, 0)
    token = tl.where(found >= 0, found, last)
    slot = lane < k + 1
    values = tl.where(lane < pos, draft, tl.where(lane == pos, token, -1))
    tl.store(out_ptr + b * (k + 1) + lane, values.to(tl.int32), mask=slot)
    tl.store(accepted_ptr + b, tl.load(accepted_ptr + b) + accepted.to(tl.int32))
    tl.store(emitted_ptr + b, tl.load(emitted_ptr + b) + pos.to(tl.int32))


@prepared
def chain_sampling(*, draft_probs, draft_token_ids, target_probs, seed, offset, output_token_ids,
                   output_accepted_token_num, output_emitted_draft_token_num):
    """See `specverify.oracles.seeded.chain_sampling`. One launch."""
    batch, k, vocab = validate(check_chain_sampling, draft_probs, draft_token_ids, target_probs, seed, offset,
                               output_token_ids, output_accepted_token_num, output_emitted_draft_token_num,
                               values=reads_values(draft_token_ids))
    if batch == 0:
        return
    chain_sampling_kernel[(batch,)](draft_probs, draft_token_ids, target_probs, seed, offset, output_token_ids,
                                    output_accepted_token_num, output_emitted_draft_token_num, k, vocab,
                                    BLOCK_K=next_power_of_2(k + 2), BLOCK=min(BLOCK_V, next_power_of_2(vocab)))
