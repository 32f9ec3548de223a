"""Oracles of the `seeded` family: samplers that draw their own uniforms from a declared generator. The oracle
regenerates the stream (`specverify.oracles.generators`) and replays the sampler's draw schedule loop by loop.

`seeded.chain_sampling` is FlashInfer 0.7.4's `ChainSpeculativeSampling`: request b draws from cuRAND's Philox
state `curand_init(seed[b], b, offset[b])`, one `curand_uniform` per use, in the order of its loops.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles.arguments import need_at_least, need_chain_tables, need_dtype, need_ndim, need_shape
from specverify.oracles.generators import curand_uniforms

PLACEHOLDER = -1
INT32_MAX = 2**31 - 1
BK_FROM = "B, K = draft_token_ids.shape"


def check_chain_sampling(draft_probs, draft_token_ids, target_probs, seed, offset, output_token_ids,
                         output_accepted_token_num, output_emitted_draft_token_num,
                         values=True) -> tuple[int, int, int]:
    """Returns (B, K, V). `values=False` skips the checks that read array contents."""
    need_dtype("draft_token_ids", draft_token_ids, "int32")
    need_ndim("draft_token_ids", draft_token_ids, 2)
    batch, k = (int(n) for n in draft_token_ids.shape)
    vocab = need_chain_tables(target_probs, draft_probs, batch, k, BK_FROM)
    for name, state in (("seed", seed), ("offset", offset)):
        need_dtype(name, state, "int64")
        need_shape(name, state, (batch,), BK_FROM)
    need_dtype("output_token_ids", output_token_ids, "int32")
    need_shape("output_token_ids", output_token_ids, (batch, k + 1), BK_FROM)
    for name, out in (("output_accepted_token_num", output_accepted_token_num),
                      ("output_emitted_draft_token_num", output_emitted_draft_token_num)):
        need_dtype(name, out, "int32")
        need_shape(name, out, (batch,), BK_FROM)
    if vocab - 1 > INT32_MAX:
        raise ValueError(f"target_probs: V = {vocab} ids do not fit the int32 output_token_ids")
    if values:
        need_at_least("draft_token_ids", draft_token_ids, PLACEHOLDER)
    return batch, k, vocab


def accepts(draft: int, p_row, q_row, u) -> bool:
    """Whether draft `draft` passes: an id in [0, V) and f32(u * q) < p with p = p_row[draft], q = q_row[draft]
    (ties reject); -1 and out-of-vocabulary ids are rejected without a read."""
    if not 0 <= draft < len(p_row):
        return False
    with np.errstate(all="ignore"):
        return bool(np.float32(np.float32(u) * np.float32(q_row[draft])) < np.float32(p_row[draft]))


def pick(res, u) -> int:
    """The token drawn from the f32 row `res` at uniform u: t = f32(u * sum(res)); the lowest v with res[v] > 0
    whose running sum exceeds t, else the largest v with res[v] > 0, else -1 (an all-zero row)."""
    res = np.asarray(res, np.float32)
    with np.errstate(all="ignore"):
        sums = np.add.accumulate(res, dtype=np.float32)
        t = np.float32(np.float32(u) * sums[-1])
    positive = res > 0
    above = np.flatnonzero(positive & (sums > t))
    if len(above):
        return int(above[0])
    return int(np.flatnonzero(positive)[-1]) if positive.any() else PLACEHOLDER


def request_uniforms(seed, offset, k: int) -> np.ndarray:
    """[B, K+2] f32: the uniforms each request b may draw (`curand_init(seed[b], b, offset[b])`; `seed` and
    `offset` int64 [B] holding uint64 bit patterns)."""
    rows = np.arange(len(seed), dtype=np.uint64)
    return curand_uniforms(np.asarray(seed, np.int64).view(np.uint64), rows,
                           np.asarray(offset, np.int64).view(np.uint64), k + 2)


def sample_row(drafts, p_rows, q_rows, uniforms) -> tuple[list[int], int, int]:
    """(the K + 1 output tokens, accepted, emitted) of one request, uniforms U_0, U_1, .. of its stream."""
    k = len(drafts)
    pos = 0
    while pos < k and accepts(int(drafts[pos]), p_rows[pos], q_rows[pos], uniforms[pos]):
        pos += 1
    accepted = pos + sum(accepts(int(drafts[i]), p_rows[i], q_rows[i], uniforms[i + 1]) for i in range(pos + 1, k))
    q_row = np.asarray(q_rows[pos], np.float32) if pos < k else np.float32(0)
    with np.errstate(all="ignore"):
        res = np.maximum(np.asarray(p_rows[pos], np.float32) - q_row, np.float32(0))    # f32, cell by cell
    u = uniforms[k + 1] if pos < k else uniforms[k]
    tokens = [int(d) for d in drafts[:pos]] + [pick(res, u)] + [PLACEHOLDER] * (k - pos)
    return tokens, accepted, pos


def chain_sampling(*, draft_probs, draft_token_ids, target_probs, seed, offset, output_token_ids,
                   output_accepted_token_num, output_emitted_draft_token_num):
    """Verify each request's drafts in order (U_i for position i), stop at the first rejection pos; go on
    counting the later positions that would pass (U_{i+1} for position i > pos); then draw the token at pos
    from max(p_pos - q_pos, 0) with U_{K+1}, or from max(p_K, 0) with U_K when all K passed. Writes the
    whole row of `output_token_ids` (-1 after pos) and adds accepted and pos into the two counters (modulo
    2^32)."""
    batch, k, _ = check_chain_sampling(draft_probs, draft_token_ids, target_probs, seed, offset, output_token_ids,
                                       output_accepted_token_num, output_emitted_draft_token_num)
    if batch == 0:
        return
    uniforms = request_uniforms(seed, offset, k)
    for b in range(batch):
        tokens, accepted, emitted = sample_row(draft_token_ids[b], target_probs[b], draft_probs[b], uniforms[b])
        output_token_ids[b] = tokens
        output_accepted_token_num[b] = added(output_accepted_token_num[b], accepted)
        output_emitted_draft_token_num[b] = added(output_emitted_draft_token_num[b], emitted)


def added(counter, n: int) -> np.int32:
    """counter + n in int32, modulo 2^32 (as the device adds)."""
    return np.array(int(counter) + n, dtype=np.int64).astype(np.int32)[()]
