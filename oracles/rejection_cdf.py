"""Oracle of `rejection.chain_cdf`: the chain sampler that picks its replacement (or bonus) token by an
inverse-CDF walk over the residual, in the padded layout.

Loop-level over requests and positions: each request is walked position by position; the residual is
built cell by cell in f32 (element-wise, so in any order) and its running sum is taken left to right. Destination passing; invalid input raises an error naming the
field.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles.arguments import need_at_least, need_dtype, need_ndim, need_shape

PLACEHOLDER = -1
INT32_MAX = 2**31 - 1
BK_FROM = "B, K+1 = candidates.shape"
V_FROM = "V = target_probs.shape[-1]"


def check_chain_cdf(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
                    accept_token_num, values=True) -> tuple[int, int, int]:
    """Returns (B, K, V). `values=False` skips the checks that read array contents."""
    need_dtype("candidates", candidates, "int64")
    need_ndim("candidates", candidates, 2)
    batch, width = (int(n) for n in candidates.shape)
    if width < 1:
        raise ValueError(f"candidates: shape must be [B, K+1] with K >= 0 (column 0 is the previous token), "
                         f"got {list(candidates.shape)}")
    k = width - 1
    need_dtype("target_probs", target_probs, "float32")
    need_ndim("target_probs", target_probs, 3)
    vocab = int(target_probs.shape[-1])
    if tuple(target_probs.shape[:2]) != (batch, k + 1) or vocab < 1:
        raise ValueError(f"target_probs: shape must be [{batch}, {k + 1}, V >= 1] ({BK_FROM}), "
                         f"got {list(target_probs.shape)}")
    need_dtype("draft_probs", draft_probs, "float32")
    need_shape("draft_probs", draft_probs, (batch, k, vocab), f"{BK_FROM}; {V_FROM}")
    need_dtype("uniform_samples", uniform_samples, "float32")
    need_shape("uniform_samples", uniform_samples, (batch, k + 1), BK_FROM)
    need_dtype("uniform_final", uniform_final, "float32")
    need_shape("uniform_final", uniform_final, (batch,), BK_FROM)
    for name, out, shape in (("predicts", predicts, (batch * (k + 1),)), ("accept_index", accept_index, (batch, k + 1)),
                             ("accept_token_num", accept_token_num, (batch,))):
        need_dtype(name, out, "int32")
        need_shape(name, out, shape, BK_FROM)
    if batch * (k + 1) - 1 > INT32_MAX:
        raise ValueError(f"accept_index: slots up to B*(K+1) - 1 = {batch * (k + 1) - 1} do not fit int32")
    if vocab - 1 > INT32_MAX:
        raise ValueError(f"target_probs: V = {vocab} ids do not fit the int32 predicts")
    if values:
        need_at_least("candidates", candidates, PLACEHOLDER)
    return batch, k, vocab


def accepts(draft: int, p_row, q_row, u, q_range: bool = True) -> bool:
    """Whether draft `draft` passes: an id in [0, V) and, with p = p_row[draft], q = q_row[draft],
    f32(u * q) < p (ties and NaN reject); with `q_range`, q must also lie in (0, 1]."""
    if not 0 <= draft < len(p_row):
        return False
    p, q = np.float32(p_row[draft]), np.float32(q_row[draft])
    if q_range and not (0 < q <= 1):
        return False
    with np.errstate(all="ignore"):
        product = np.float32(np.float32(u) * q)
    return bool(product < p)


def residual(p_row, q_row, q_range: bool = True) -> np.ndarray:
    """f32 residual after a rejection, cell by cell: max(p[v] - q'[v], 0) with a NaN difference taken as
    0. q' is q where 0 <= q <= 1, else 0 (`q_range`), or q with only a NaN zeroed (not `q_range`).
    `q_row` None (every draft accepted): p as it stands."""
    p = np.array(p_row, np.float32)
    if q_row is None:
        return p
    q = np.array(q_row, np.float32)
    with np.errstate(all="ignore"):
        kept = ((q >= 0) & (q <= 1)) if q_range else ~np.isnan(q)
        diff = p - np.where(kept, q, np.float32(0))                       # one f32 subtraction per cell
        return np.where(diff > 0, diff, np.float32(0)).astype(np.float32)  # NaN and negatives become 0


def running_sums(res) -> np.ndarray:
    """The f32 running sum of `res`, left to right (NumPy's accumulate adds in order)."""
    with np.errstate(all="ignore"):
        return np.add.accumulate(np.asarray(res, np.float32), dtype=np.float32)


def pick(res, u_final) -> int:
    """The inverse-CDF pick: t = f32(u_final * total), the lowest v whose running sum exceeds t; V - 1
    when none does (total 0 or NaN, t at or past the sum)."""
    sums = running_sums(res)
    with np.errstate(all="ignore"):
        t = np.float32(np.float32(u_final) * sums[-1])
    above = np.flatnonzero(sums > t)
    return int(above[0]) if len(above) else len(res) - 1


def verify_row(drafts, p_rows, q_rows, uniforms, u_final, q_range: bool = True) -> tuple[int, int]:
    """(accepted drafts, picked token) of one request: drafts d_0..d_{K-1} with target rows p_0..p_K
    and draft rows q_0..q_{K-1}."""
    k = len(drafts)
    num = 0
    while num < k and accepts(int(drafts[num]), p_rows[num], q_rows[num], uniforms[num], q_range):
        num += 1
    res = residual(p_rows[num], q_rows[num] if num < k else None, q_range)
    return num, pick(res, u_final)


def chain_cdf(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
              accept_token_num):
    """Verify each request's drafts `candidates[b, 1:]` in order by `accepts`, stop at the first
    rejection, then emit the `pick` of the residual of that position (of p_K when all K are accepted).
    Writes predicts[b*(K+1) + 0..num], accept_index[b, 0..num] (those flat slots) and
    accept_token_num[b] = num; nothing else."""
    run(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
        accept_token_num, q_range=True)


def chain_cdf_snapshot(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts,
                       accept_index, accept_token_num):
    """`chain_cdf` under dialect `snapshot`: no range test on q (q = 0 accepts iff p > 0) and only a NaN
    q is zeroed in the residual."""
    run(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
        accept_token_num, q_range=False)


def run(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts, accept_index,
        accept_token_num, q_range: bool) -> None:
    batch, k, _ = check_chain_cdf(candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts,
                                  accept_index, accept_token_num)
    for b in range(batch):
        drafts = candidates[b, 1:]
        num, token = verify_row(drafts, target_probs[b], draft_probs[b], uniform_samples[b], uniform_final[b],
                                q_range)
        base = b * (k + 1)
        for pos in range(num):
            predicts[base + pos] = drafts[pos]
            accept_index[b, pos] = base + pos
        predicts[base + num] = token
        accept_index[b, num] = base + num
        accept_token_num[b] = num
