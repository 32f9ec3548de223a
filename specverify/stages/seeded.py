"""Stage records of the `seeded` family: samplers that draw their own uniforms from a generator they declare.
The record names the generator and the draw schedule; a replay of both is its oracle, so an implementation that
follows them is judged byte for byte, like any other stage.

`seeded.chain_sampling` is FlashInfer 0.7.4's `chain_speculative_sampling` (SGLang's chain path and
TensorRT-LLM's PyTorch backend run it), at the kernel's level: per-request seeds and offsets (FlashInfer's Python
wrapper broadcasts a single one, or takes them from a torch generator, before the launch). Choices the record
makes where FlashInfer says nothing:
- -1 and out-of-vocabulary drafts are rejected without a read (FlashInfer 0.7.4 reads column -1, the cell before
  the row, and would fail such valid cases);
- the counters are added into modulo 2^32, as int32 on the device.
"""
from __future__ import annotations

import numpy as np

from specverify.records import bench_inputs as bench
from specverify.records.randomness import Protocol, Randomness
from specverify.records.stage import BENCH_SPEC, Example, Floor, I, O
from specverify.records.wiring import wired
from specverify.strategies import panels
from specverify.strategies import seeded as draw
from specverify.strategies.deciding import rejection_rows

f32 = np.float32
# what an implementation that replays this record declares (`specverify.records.randomness`)
FLASHINFER_CHAIN = Protocol("curand-philox4x32-10", "curand_init(seed[b], subsequence=b, offset[b])",
                            "flashinfer-chain-speculative-sampling", "0.7.4")
P_ROWS = [[0.25, 0.25, 0.375, 0.125], [0.25, 0.25, 0.25, 0.25], [0, 0.5, 0.25, 0.25]]
Q_ROWS = [[0.125, 0.5, 0.25, 0.125], [0, 0, 1, 0]]


def chain_sampling_worked() -> Example:
    """V = 4, K = 2, drafts [1, 2], the same rows twice, seed 0 and offset 0: row 0 draws U = 0.39905, 0.88052,
    0.73571, 0.60548 (subsequence 0), row 1 U = 0.51668, 0.93966, 0.05899, 0.51551 (subsequence 1).
    Row 0 accepts draft 1 (0.39905 * 0.5 < 0.25) and rejects draft 2 (0.88052 * 1 >= 0.25): its row is
    max(p_1 - q_1, 0) = [0.25, 0.25, 0, 0.25], t = U_3 * 0.75 = 0.45411, running sums [0.25, 0.5, 0.5, 0.75]:
    token 1; out [1, 1, -1], one accepted, one emitted. Row 1 rejects draft 1 at once (0.51668 * 0.5 >= 0.25),
    then counts draft 2 with U_2 (0.05899 * 1 < 0.25): accepted 1, emitted 0; its row [0.125, 0, 0.125, 0],
    t = U_3 * 0.25 = 0.12888: token 2; out [2, -1, -1]. The counters start at 5 and 7 and are added into."""
    return Example("valid", inputs={
        "draft_probs": np.array([Q_ROWS, Q_ROWS], f32), "draft_token_ids": np.array([[1, 2], [1, 2]], np.int32),
        "target_probs": np.array([P_ROWS, P_ROWS], f32), "seed": np.zeros(2, np.int64),
        "offset": np.zeros(2, np.int64), "output_accepted_token_num": np.array([5, 7], np.int32),
        "output_emitted_draft_token_num": np.array([5, 7], np.int32),
    }, outputs=draw.buffers(2, 2))


def chain_sampling_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K = BENCH_SPEC drafts per request drawn by a greedy drafter, target rows softmax tables, draft rows
    a mix of the target row and another table, both on the 2**-16 grid (rows sum to 1 exactly), seeds and
    offsets drawn per request."""
    k = BENCH_SPEC
    target, top = bench.probability_table(rng, batch * (k + 1), vocab)
    other, _ = bench.probability_table(rng, batch * k, vocab)
    target = bench.on_grid(target.reshape(batch, k + 1, vocab))
    draft = bench.on_grid(0.5 * target[:, :k] + 0.5 * other.reshape(batch, k, vocab))
    return Example("valid", inputs={
        "draft_probs": draft, "draft_token_ids": top.reshape(batch, k + 1)[:, :k].astype(np.int32),
        "target_probs": target, "seed": draw.as_int64(rng.integers(0, 2**63, batch, dtype=np.uint64)),
        "offset": draw.as_int64(rng.integers(0, 2**40, batch, dtype=np.uint64)),
        "output_accepted_token_num": np.zeros(batch, np.int32),
        "output_emitted_draft_token_num": np.zeros(batch, np.int32),
    }, outputs=draw.buffers(batch, k))


CHAIN_SAMPLING = wired(
    name="seeded.chain_sampling",
    hazard=None, invariants=None,
    doc="chain rejection sampling that draws its own uniforms (cuRAND Philox, FlashInfer 0.7.4's schedule)",
    inputs=(
        I("draft_probs", "float32", "B, K, V", doc="draft probabilities q_0..q_{K-1}"),
        I("draft_token_ids", "int32", "B, K", doc="the drafts; -1 and ids >= V allowed"),
        I("target_probs", "float32", "B, K+1, V", doc="target probabilities p_0..p_K; p_K is the bonus row"),
        I("seed", "int64", "B", doc="each request's Philox seed, a uint64 held by its bit pattern"),
        I("offset", "int64", "B", doc="the words each request's stream skips first, a uint64 by its bit pattern"),
        I("output_accepted_token_num", "int32", "B", inout=True,
          doc="added into: the drafts that pass, the first rejection's later ones included"),
        I("output_emitted_draft_token_num", "int32", "B", inout=True,
          doc="added into: the drafts emitted (those before the first rejection)"),
    ),
    outputs=(
        O("output_token_ids", "int32", "B, K+1",
          doc="written whole: the accepted drafts, the drawn token, then -1"),
    ),
    semantics="""\
Request b draws from cuRAND's Philox4x32-10 state `curand_init(seed[b], b, offset[b])`: U_j is the j-th
`curand_uniform` of that state (j = 0, 1, ..), the port in `specverify.oracles.generators` word for word:
the block at counter (b << 64) + (offset + j) // 4 keyed by the seed's two 32-bit halves, word (offset + j) % 4,
as f32(f32(word) * 2^-32 + 2^-33), a value in (0, 1] that is exactly 1.0 for the 128 largest words.

- Walk the drafts i = 0 .. K-1 with U_i: draft d = `draft_token_ids[b, i]` passes iff 0 <= d < V and
   f32(U_i * q) < p, with q = `draft_probs[b, i, d]`, p = `target_probs[b, i, d]` (one f32 multiplication
   rounded to nearest; ties reject; -1 and out-of-vocabulary drafts fail without a read). The first that fails
   is pos; pos = K when all pass.
- emitted = pos; accepted = pos plus the later positions i = pos+1 .. K-1 whose draft passes the same test
   with U_{i+1} (U_{pos+1} is drawn and not used).
- The drawn row r = max(p_pos - q_pos, 0), f32 cell by cell (q_pos = 0 when pos = K), and the uniform
   u = U_{K+1} after a rejection, U_K when all K pass. With t = f32(u * sum(r)), the token is the lowest v with
   r[v] > 0 whose running sum r[0] + .. + r[v] exceeds t; else (t at or past the sum) the largest v with
   r[v] > 0; else (an all-zero row) -1.
- `output_token_ids[b]` = the pos accepted drafts, the token, then -1 to K; `output_accepted_token_num[b]` +=
   accepted and `output_emitted_draft_token_num[b]` += emitted, modulo 2^32. Nothing else is written.

A request draws K + 2 uniforms after a rejection, K + 1 when all K pass; the next call's offset must advance by
at least K + 2 (FlashInfer reserves B * (K + 2) words of its generator, rounded up to a multiple of 4, per call).
The order of the sums is not specified, so exact results need sums that do not depend on it: valid inputs put
every probability on a dyadic grid (see the valid tier), where any order gives the same f32 sums.

Invalid: draft_token_ids not int32 [B, K] or holding an id below -1; probability tables, seeds, offsets,
counters or outputs of another dtype or shape (target [B, K+1, V >= 1], draft [B, K, V], seed and offset int64
[B], the counters int32 [B], output_token_ids int32 [B, K+1]).""",
    tiers={
        "valid": "V from 1 to a few thousand (1, 2, 1023, 1024, 1025, 2049, 4097 or small, and half the draws just "
                 "past a 1024-cell tile: 1025, 2049 or 4097; at most 1025 for the interpreter, with B <= 4), K from 0 "
                 "to 8, B from 0 with B*(K+1)*V bounded. Probabilities are multiples of 2**-bits (bits 2, 4, 8 or 16) "
                 "with row sums <= 1 and 0, 50 or 90 % zero cells; drafts drawn from their q row, with -1 and out-of-"
                 "vocabulary ids mixed in; seeds below 2^63 and offsets below 2^40, counters from 0 to 999. Planted: a"
                 " draw of exactly 1.0 at an acceptance, the count or the pick (states found by search), ties p = "
                 "f32(U * q) made from the request's own stream (with U_i or U_{i+1}), q = p on whole requests (an "
                 "all-zero row: -1), an all-zero bonus row, seeds next to 2^64, offsets 1, 2, 3, 5, 2^34 + 3 and next "
                 "to 2^64, rows sharing one seed and offset or with offsets K + 2 apart, bait in the cells just before"
                 " a -1 draft's rows, and rows led by cell 0 (3/4 of the mass, q = 0 there) with a positive last cell "
                 "(q = 0 there too), so the pick is mostly token 0 with positive cells in the last tile.",
        "invalid": "One rule broken: a draft id of -2, a seed per request plus one, any field of the wrong dtype, "
                   "rank or length.",
    },
    bench=chain_sampling_bench,
    deciding=rejection_rows,
    launches={"triton": 1, "torch": 380},   # eager Philox: ten rounds of int64 ops over [B, K+2]
    randomness=Randomness(("seed", "offset"), FLASHINFER_CHAIN, panels.seeded_chain_launch,
                          panels.seeded_chain_emitted, panels.seeded_chain_advanced),
    floors=(
        Floor("reached: a draw of exactly 1.0", 6, "RNG.md: curand_uniform is exactly 1.0 for the 128 largest "
              "words, a real path (the u = 1.0 fallback)", interpreted=True),
        Floor("reached: a tie f32(U * q) == p", 4, "RNG.md: the tie rule (ties reject)", interpreted=True),
        Floor("reached: an all-zero pick row (-1)", 15, "RNG.md: -1 from an all-zero residual, a shipped path",
              interpreted=True),
        Floor("reached: a -1 draft", 4, "-1 drafts rejected without a read (FlashInfer 0.7.4 reads column -1)",
              interpreted=True),
        Floor("reached: an out-of-vocabulary draft", 4, "out-of-vocabulary drafts rejected without a read",
              interpreted=True),
        Floor("reached: a later draft counted as accepted", 5, "accepted counts the later passing drafts, with "
              "U_{i+1}", interpreted=True),
        Floor("reached: every draft accepted (bonus pick)", 8, "K + 1 draws when all K pass: the pick with U_K"),
        Floor("reached: a rejection", 15, "K + 2 draws after a rejection: the pick with U_{K+1}"),
        Floor("planted: colliding rows", 12, "RNG.md: the subsequence is the batch row (one seed and offset in "
              "two rows give two streams)"),
        Floor("planted: odd offsets", 15, "offsets that are not multiples of 4 start inside a Philox block"),
        Floor("planted: seeds near 2^64", 15, "the seed's two 32-bit halves are the key"),
        Floor("planted: placeholder bait", 15, "the cells before a -1 draft's rows would accept it, were they read"),
        Floor("planted: first cell leads", 15, "the pick mostly token 0 with positive cells in the last tile"),
        Floor("planted: zero bonus row", 15, "an all-zero bonus row picks -1"),
        Floor("vocab: more than one 1024-cell tile", 15, "the kernels' 1024-cell tiles: the last one short",
              interpreted=True),
        Floor("chain: K=0 (bonus only)", 8, "no drafts: the bonus row only"),
    ),
)

STAGES = (CHAIN_SAMPLING,)
