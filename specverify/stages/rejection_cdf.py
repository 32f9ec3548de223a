"""Stage record `rejection.chain_cdf`: the chain sampler of SGLang's `chain_speculative_sampling_triton`
(FlashInfer-derived), which draws its replacement or bonus token by walking the CDF of a residual.

Choices the record makes where engines differ or say nothing:
- -1 and out-of-vocabulary drafts are rejected without reading their probabilities. The shipped
  kernels read column -1 for a placeholder (the cell before the row); they fail such valid cases by
  design, as they would fail the `gumbel` rule of `rejection.random`.
- FlashInfer's own `chain_speculative_sampling` is not a dialect here: it takes no uniforms (Philox
  draws, so a byte-exact oracle needs `u[B, K+2]` indexed by its own stream rule, another field), writes
  -1 for an all-zero residual instead of V - 1, fills the rest of each row with -1, and adds into its
  counters. A dialect keeps the record's fields, so it would need a record of its own.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles import rejection_cdf as oracle
from specverify.records import bench_inputs as bench
from specverify.records.stage import BENCH_SPEC, Dialect, Example, I, O
from specverify.records.wiring import kernels, wired
from specverify.strategies import rejection_cdf as draw
from specverify.strategies.deciding import rejection_rows

f32 = np.float32


def cdf_call(candidates, target, draft, uniforms, u_final) -> Example:
    """A valid example from plain lists (requests of equal K)."""
    cand = np.array(candidates, np.int64)
    batch, k1 = cand.shape
    target = np.array(target, f32).reshape(batch, k1, -1)
    return Example("valid", inputs={
        "candidates": cand, "target_probs": target,
        "draft_probs": np.array(draft, f32).reshape(batch, k1 - 1, target.shape[-1]),
        "uniform_samples": np.array(uniforms, f32), "uniform_final": np.array(u_final, f32),
    }, outputs=draw.buffers(batch, k1 - 1))


P_ROWS = [[0.25, 0.25, 0.375, 0.125], [0.25, 0.25, 0.25, 0.25], [0, 0.5, 0.25, 0.25]]
Q_ROWS = [[0.125, 0.5, 0.25, 0.125], [0, 0, 1, 0]]


def chain_cdf_worked() -> Example:
    """V = 4, K = 2, drafts [1, 2], the same rows twice. Request 0 (u = [0.5, 0.9]) meets a tie at
    position 0 (0.5 * 0.5 = 0.25 = p): rejected; residual [0.125, 0, 0.125, 0], total 0.25, t = 0.125,
    running sums [0.125, 0.125, 0.25, 0.25]: token 2, emitted alone. Request 1 (u = [0.25, 0.125])
    accepts both (0.125 < 0.25, 0.125 < 0.25) and picks its bonus from p_2 with t = 0.5, running sums
    [0, 0.5, 0.75, 1]: token 2. Column 2 of the uniforms is never read."""
    return cdf_call([[7, 1, 2], [7, 1, 2]], [P_ROWS, P_ROWS], [Q_ROWS, Q_ROWS],
                    [[0.5, 0.9, 0.3], [0.25, 0.125, 0.7]], [0.5, 0.5])


def chain_cdf_snapshot_worked() -> Example:
    """Request 0 drafts a token of draft probability 0 (p = 0.25): `snapshot` accepts it and picks its
    bonus from [0, 0, 0.5, 0.5] at t = 0.25: token 2 (the record rejects it: residual
    [0.25, 0, 0, 0.25], t = 0.125, token 0). Request 1 ties at position 0; q = 2 at token 2 is zeroed
    by the record (residual [0, 0, 0.5, 0]: token 2) but kept by `snapshot` (all-zero residual: V - 1 = 3)."""
    quarter = [0.25] * 4
    return cdf_call([[5, 0], [5, 1]], [[quarter, [0, 0, 0.5, 0.5]], [[0.25, 0.25, 0.5, 0], quarter]],
                    [[[0, 0.5, 0.5, 0]], [[0.5, 0.5, 2.0, 0]]], [[0.5, 0.5], [0.5, 0.5]], [0.25, 0.5])


def chain_cdf_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K = BENCH_SPEC drafts per request drawn by a greedy drafter (about 0.7 accepted), target
    rows softmax tables, draft rows a mix of the target row and another table, both on the valid tier's
    2**-16 grid (what flooring loses goes to the row's largest cell: rows sum to 1 exactly), uniforms on
    the 2**-8 grid: every sum is exact, so the outputs do not depend on summation order."""
    k = BENCH_SPEC
    target, top = bench.probability_table(rng, batch * (k + 1), vocab)
    other, _ = bench.probability_table(rng, batch * k, vocab)
    target = bench.on_grid(target.reshape(batch, k + 1, vocab))
    draft = bench.on_grid(0.5 * target[:, :k] + 0.5 * other.reshape(batch, k, vocab))
    cand = top.reshape(batch, k + 1).astype(np.int64)
    return Example("valid", inputs={
        "candidates": np.concatenate([bench.token_ids(rng, (batch, 1), vocab, np.int64), cand[:, :k]], 1),
        "target_probs": target, "draft_probs": draft,
        "uniform_samples": draw.grid_uniforms(rng, (batch, k + 1), 8),
        "uniform_final": draw.grid_uniforms(rng, (batch,), 8),
    }, outputs=draw.buffers(batch, k))



ACCEPT = """\
- the draft d = `candidates[b, pos + 1]` at position pos is accepted iff 0 <= d < V, q =
  `draft_probs[b, pos, d]` lies in (0, 1], and f32(u * q) < p, with u = `uniform_samples[b, pos]`, one
  f32 multiplication rounded to nearest, and p = `target_probs[b, pos, d]`. Ties reject (u * q == p,
  u = 0 with p = 0 included); a NaN p or q rejects. -1 and out-of-vocabulary drafts are rejected and
  their cells are not read."""

SNAPSHOT_RULE = """\
- acceptance as the record's but with no range test on q: accepted iff 0 <= d < V and f32(u * q) < p,
  so q = 0 accepts exactly when p > 0, and q > 1 may accept;
- in the residual only a NaN q becomes 0 (q < 0, q > 1 and infinities are subtracted as they are).
Everything else is the record's rule."""


CHAIN_CDF = wired(
    name="rejection.chain_cdf",
    module="rejection_cdf",
    doc="chain rejection sampling with ties rejecting, the replacement or bonus drawn by an inverse-CDF walk",
    inputs=(
        I("candidates", "int64", "B, K+1",
          doc="column 0 the previous token (not read), columns 1..K the drafts; -1 and ids >= V allowed"),
        I("target_probs", "float32", "B, K+1, V", doc="target probabilities p_0..p_K; p_K is the bonus row"),
        I("draft_probs", "float32", "B, K, V", doc="draft probabilities q_0..q_{K-1}"),
        I("uniform_samples", "float32", "B, K+1",
          doc="one acceptance uniform per position; column K is never read"),
        I("uniform_final", "float32", "B", doc="one uniform per request for the pick"),
    ),
    outputs=(
        O("predicts", "int32", "B*(K+1)",
          doc="written: slots b*(K+1) + 0..num (the accepted drafts, then the pick)"),
        O("accept_index", "int32", "B, K+1", doc="written: [b, 0..num] = the flat slots b*(K+1) + 0..num"),
        O("accept_token_num", "int32", "B", doc="written: num, the drafts accepted"),
    ),
    semantics=f"""\
Each request b walks its drafts pos = 0, 1, .. K-1 and stops at the first one rejected:
{ACCEPT}
Let num be the number accepted (0..K). The token emitted after them (the replacement after a
rejection, the bonus when all K pass) is picked from one row `res` of V f32 cells:
- after a rejection at pos = num: res[v] = max(p_num[v] - q'[v], 0), one f32 subtraction, with q' =
  q_num[v] where 0 <= q_num[v] <= 1 and 0 otherwise (NaN, infinities, negative or above 1); a NaN
  difference counts as 0;
- when all K are accepted: res = p_K as it stands (no draft row is read; NaN or negative cells are left
  as they are).
Then total = the f32 sum of res, t = f32(`uniform_final[b]` * total), and the pick is the lowest v whose
running sum res[0] + .. + res[v] exceeds t; V - 1 when none does (total 0 or NaN, or t at or past the
sum). Exactly one `uniform_final` is used per request, and the uniforms after the first rejection are
not read.

Written: `predicts[b*(K+1) + pos]` = the draft for pos < num and the pick at pos = num;
`accept_index[b, pos]` = b*(K+1) + pos for pos <= num; `accept_token_num[b]` = num. The slots after num
in `predicts` and `accept_index` are left untouched, and so is everything else. K = 0 emits only the
pick from p_0.

The order of the sum is not specified, so exact results need sums that do not depend on it: valid
inputs are such that every partial sum is exact in f32 (see the valid tier).

Invalid: candidates not int64 [B, K+1] with K + 1 >= 1 or holding an id below -1; probability tables,
uniforms or outputs of another dtype or shape (target [B, K+1, V >= 1], draft [B, K, V], uniforms
[B, K+1] and [B], predicts [B*(K+1)], accept_index [B, K+1], accept_token_num [B], all int32 outputs).""",
    tiers={
        "valid": "V from 1 to a few thousand (1, 2, 1023, 1024, 1025, 2049, 4097 or small; at most 1025 for "
                 "the interpreter, with B <= 4), K from 0 to 8, B from 0 with B*(K+1)*V bounded. Probabilities are "
                 "multiples of 2**-bits (bits 2, 4, 8 or 16) with row sums <= 1 and 0, 50 or 90 % zero cells; "
                 "uniforms multiples of 2**-1 to 2**-8: every partial sum, difference and u * q is exact in "
                 "f32 in any order. Drafts drawn from their q row, with -1 and out-of-vocabulary ids mixed "
                 "in. Planted: ties u * q == p (and u = 0 with p = 0), q = p on whole requests (all accepted, "
                 "or an all-zero residual and V - 1), q = 0 and q > 1 at the drafted token, an all-zero bonus "
                 "row, u_final 0 or 1, u_final putting t exactly on a running sum, and bait for placeholders: the "
                 "cells just before a -1 draft's rows (the last cells of the rows before it) set so that "
                 "reading them would accept it (such rows may sum past 1: the sums stay exact).",
        "hazard": "A valid draw made pathological: general f32 rows and uniforms (sums depend on their order), "
                  "NaN, +-inf, -0.25 or 1.5 in 1 %, 30 % or every cell of p and q. Checked: num in [0, K]; "
                  "predicts holds the num accepted drafts then an id in [0, V); accept_index the slots "
                  "b*(K+1) + 0..num; the slots after num untouched; and when the pick row is finite, >= 0, "
                  "with a positive total and t < total * (1 - 2**-20), the picked cell is > 0.",
        "invalid": "One rule broken: a draft id of -2, candidates with no column, any field of the wrong "
                   "dtype, rank or length.",
    },
    bench=chain_cdf_bench,
    deciding=rejection_rows,
    launches={"triton": 1, "torch": 60},
    dialects={
        "snapshot": Dialect(
            doc="SGLang's older snapshots of the same kernel: no range test on q (q = 0 accepts when p > 0), "
                "and only a NaN q is zeroed in the residual",
            rule=SNAPSHOT_RULE, words="no range test on q: f32(u * q) < p", oracle=oracle.chain_cdf_snapshot,
            worked=chain_cdf_snapshot_worked, impls=kernels("rejection_cdf", "chain_cdf_snapshot")),
    },
)

STAGES = (CHAIN_CDF,)
